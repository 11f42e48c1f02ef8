"""By default a rule posts a thread only once it has earned it; everything else is listed for a person."""

import pytest

from agent.diff import DiffIndex, parse_unified_diff
from agent.service_settings import Settings
from agent.verdicts.feedback import PeopleVotes
from agent.verdicts.posting import HELD_BY_TIER, Posting, broken_as_written, taint_rules
from agent.verdicts.track_record import MIN_JUDGED, Record
from agent.verifier import VerifiedFinding, VerifierInputs, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Category, Confidence, Finding, Severity

HEAD = "import os\n\n\ndef run(cmd):\n    try:\n        os.system(cmd)\n    except Exception:\n        pass\n"
DIFF = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -3,2 +3,6 @@ import os
 
 def run(cmd):
+    try:
+        os.system(cmd)
+    except Exception:
+        pass
"""
SINK = "        os.system(cmd)"
EXCEPT = "    except Exception:"


def found(
    rule: str,
    *,
    evidence: str = EXCEPT,
    severity: Severity = "medium",
    confidence: Confidence = "high",
    cwe: str | None = None,
) -> Finding:
    category: Category = "security" if cwe else "code_quality"
    return Finding(
        path="app.py",
        line=6 if evidence == SINK else 7,
        end_line=6 if evidence == SINK else 7,
        category=category,
        severity=severity,
        title="A finding",
        body="Why it matters.",
        evidence=evidence,
        reviewer="security" if cwe else "code_quality",
        rule=rule,
        confidence=confidence,
        cwe=cwe,
        fingerprint=make_fingerprint(path="app.py", category=category, rule=rule, evidence=evidence),
    )


def verified(
    finding: Finding,
    *,
    record: dict[str, Record] | None = None,
    votes: PeopleVotes | None = None,
    posting: Posting = "proven",
) -> VerifiedFinding:
    inputs = VerifierInputs(
        workspace=SnapshotWorkspace({"app.py": HEAD}),
        diff_index=DiffIndex(parse_unified_diff(DIFF)),
        people_votes=votes or PeopleVotes(),
        track_record=record if record is not None else {},
        posting=posting,
    )
    [v] = verify_findings([finding], inputs)
    return v


def test_a_rule_proven_on_held_out_history_posts_and_one_judged_too_seldom_does_not() -> None:
    proven = {"ruff:BLE001": Record(right=3, debatable=1, wrong=0, commits=3)}
    assert verified(found("ruff:BLE001"), record=proven).verdict == "REAL"
    seldom = {"ruff:BLE001": Record(right=MIN_JUDGED - 1, debatable=0, wrong=0, commits=MIN_JUDGED - 1)}
    assert verified(found("ruff:BLE001"), record=seldom).verdict == "NEEDS_HUMAN_REVIEW"
    one_commit = {"ruff:BLE001": Record(right=4, debatable=0, wrong=0, commits=1)}  # one observation
    assert verified(found("ruff:BLE001"), record=one_commit).verdict == "NEEDS_HUMAN_REVIEW"


def test_an_unproven_advisory_rule_is_listed_for_a_person_with_the_reason_and_its_cwe() -> None:
    from agent.verdicts.track_record import shipped_track_record

    assert "python:xpath-injection" not in shipped_track_record()  # a rule no held-out set has judged yet
    v = verified(found("python:xpath-injection", evidence=SINK, cwe="CWE-643"))
    assert v.verdict == "NEEDS_HUMAN_REVIEW"
    assert HELD_BY_TIER in v.reason and "never judged on open-source history" in v.reason
    assert v.finding.cwe == "CWE-643"
    judged = {"ruff:B006": Record(right=0, debatable=5, wrong=0, commits=5)}  # debatable is not right
    v = verified(found("ruff:B006"), record=judged)
    assert v.verdict == "NEEDS_HUMAN_REVIEW" and "right in 0 of 5 findings" in v.reason


def test_a_critical_finding_posts_whatever_its_rule() -> None:
    assert verified(found("secrets:known-prefix", evidence=SINK, severity="critical")).verdict == "REAL"


def test_a_rule_the_projects_people_vouched_for_posts() -> None:
    assert verified(found("tests:untested-new"), votes=PeopleVotes(by_rule={"tests:untested-new": (1, 3)})).verdict == (
        "REAL"
    )
    too_few = PeopleVotes(by_rule={"tests:untested-new": (0, 2)})
    assert verified(found("tests:untested-new"), votes=too_few).verdict == "NEEDS_HUMAN_REVIEW"


def test_request_data_reaching_an_injection_sink_posts_and_a_sink_alone_does_not() -> None:
    assert verified(found("python:shell-interpolation", evidence=SINK, cwe="CWE-78")).verdict == "REAL"
    assert verified(found("javascript:command-injection", evidence=SINK, cwe="CWE-78")).verdict == "REAL"
    # a sink-only pattern of the same class, and a taint rule of another class, have not earned a thread
    assert verified(found("patterns:shell-interpolation", evidence=SINK, cwe="CWE-78")).verdict == "NEEDS_HUMAN_REVIEW"
    assert verified(found("python:open-redirect", evidence=SINK, cwe="CWE-601")).verdict == "NEEDS_HUMAN_REVIEW"
    # data of unknown origin is low confidence: a person, as before
    unknown = found("python:shell-interpolation", evidence=SINK, cwe="CWE-78", confidence="low")
    assert verified(unknown).verdict == "NEEDS_HUMAN_REVIEW"


def test_the_injection_taint_rules_are_the_engines_rules_of_the_four_classes() -> None:
    rules = taint_rules()
    assert {"python:sql-interpolation", "python:shell-interpolation", "python:code-eval"} <= rules
    assert {"python:unsafe-deserialization", "javascript:sql-injection", "go:command-injection"} <= rules
    assert not {"javascript:path-traversal", "python:path-traversal", "patterns:sql-interpolation"} & rules


def test_code_broken_as_written_posts_except_what_ruff_cannot_decide() -> None:
    broken = ("ruff:invalid-syntax", "ruff:F811", "ruff:F401", "ruff:B012", "ruff:E722", "ruff:PLE0101", "ruff:PLE0604")
    for rule in broken:  # PLE0604: the analyzer drops `Class.__name__` entries, strings at run time
        assert broken_as_written(rule), rule
        assert verified(found(rule)).verdict == "REAL", rule
    assert broken_as_written("ruff:PLE0605") is None  # `__all__` extended from another module's list
    assert broken_as_written("ruff:PLE0704") is None  # a bare raise in a helper its callers run in `except`
    assert verified(found("ruff:PLE0605")).verdict == "NEEDS_HUMAN_REVIEW"
    assert broken_as_written("ruff:F821") is None and broken_as_written("bandit:PLE0101") is None
    # F821 posts only in the shape the analyzer calls high confidence (a name the module binds nowhere
    # and cannot receive): its record was made of the other shapes, so it does not hold that one back
    poor_f821 = {"ruff:F821": Record(right=3, debatable=3, wrong=9, commits=9)}
    assert verified(found("ruff:F821"), record=poor_f821).verdict == "REAL"
    maybe = verified(found("ruff:F821", confidence="medium"), record=poor_f821)
    assert maybe.verdict == "NEEDS_HUMAN_REVIEW" and "right in 3 of 15" in maybe.reason
    assert verified(found("ruff:F821", confidence="medium")).verdict == "NEEDS_HUMAN_REVIEW"  # by the tier
    # ...even where the rule's record (made mostly of the high-confidence shape) would prove it
    proven_f821 = {"ruff:F821": Record(right=60, debatable=10, wrong=40, commits=90)}
    assert verified(found("ruff:F821", confidence="medium"), record=proven_f821).verdict == "NEEDS_HUMAN_REVIEW"
    # a poor record still holds a listed rule back: the tier never overrides the record
    poor = {"ruff:F401": Record(right=0, debatable=0, wrong=5, commits=4)}
    v = verified(found("ruff:F401"), record=poor)
    assert v.verdict == "NEEDS_HUMAN_REVIEW" and HELD_BY_TIER not in v.reason


def test_posting_all_restores_posting_every_rule_no_record_holds_back() -> None:
    assert verified(found("tests:untested-new"), posting="all").verdict == "REAL"
    assert verified(found("ruff:B006"), posting="all").verdict == "REAL"
    poor = {"ruff:B006": Record(right=0, debatable=0, wrong=5, commits=4)}
    assert verified(found("ruff:B006"), record=poor, posting="all").verdict == "NEEDS_HUMAN_REVIEW"


def test_the_shipped_record_proves_rules_even_when_holding_back_is_switched_off() -> None:
    # track_record={} (Settings.hold_by_track_record off) holds nothing back; ruff:F811's shipped
    # record (2 right, 1 debatable on 3 commits) still proves it
    assert verified(found("ruff:F811"), record={}).verdict == "REAL"


def test_the_setting_reads_reviewloop_posting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_POSTING", "all")
    assert Settings().posting == "all"
    monkeypatch.delenv("REVIEWLOOP_POSTING")
    assert Settings().posting == "proven"
    monkeypatch.setenv("REVIEWLOOP_POSTING", "everything")
    with pytest.raises(ValueError, match="posting"):
        Settings()


def test_a_listed_security_finding_keeps_its_cwe_and_reason_in_the_summary() -> None:
    from agent.gitlab.publisher import FindingToPublish, summary_body

    v = verified(found("python:weak-hash", evidence=SINK, cwe="CWE-328"))
    body = summary_body("Summary.", [FindingToPublish(1, v.finding, v.verdict, v.reason)])
    assert "`app.py:6` medium · security · CWE-328 · A finding — python:weak-hash is not yet proven" in body


def test_findings_held_for_one_reason_are_listed_once_with_their_places_counted() -> None:
    from agent.gitlab.publisher import MAX_LISTED_PER_REASON, FindingToPublish, summary_body

    held = verified(found("ruff:BLE001"))
    assert held.verdict == "NEEDS_HUMAN_REVIEW"
    many = range(1, MAX_LISTED_PER_REASON + 4)
    same = [FindingToPublish(n, held.finding.model_copy(update={"line": n}), held.verdict, held.reason) for n in many]
    other = verified(found("python:weak-hash", evidence=SINK, cwe="CWE-328"))
    body = summary_body("Summary.", [*same, FindingToPublish(99, other.finding, other.verdict, other.reason)])
    assert body.count(held.reason) == 1, "one reason, said once for the group"
    assert f"- {MAX_LISTED_PER_REASON + 3} × `ruff:BLE001` — {held.reason}" in body
    assert "\n  - `app.py:1` medium · code_quality · A finding" in body
    assert f"\n  - `app.py:{MAX_LISTED_PER_REASON}` " in body
    assert f"`app.py:{MAX_LISTED_PER_REASON + 1}`" not in body
    assert "  - … and 3 more of `ruff:BLE001`" in body
    # a finding alone with its reason keeps the one-line form
    assert "\n- `app.py:6` medium · security · CWE-328 · A finding — python:weak-hash is not yet proven" in body


def test_hygiene_in_example_code_is_listed_but_a_demo_that_does_not_parse_posts() -> None:
    from agent.verdicts.posting import unearned_voice
    from reviewers.paths import is_sample_path

    for folder in ("example_project", "demo/demoproject", "sample_taggit", "examples", "example2"):
        assert is_sample_path(f"{folder}/urls.py"), folder
    assert not is_sample_path("shop/exampled.py") and not is_sample_path("samplers/urls.py")
    record = {"ruff:F401": Record(right=30, debatable=4, wrong=10, commits=40)}  # proven on product code
    for rule in ("ruff:F401", "ruff:E722", "ruff:invalid-syntax"):
        product = found(rule)
        demo = product.model_copy(update={"path": "example_project/urls.py"})
        assert unearned_voice(product, PeopleVotes(), record) is None, rule
        listed = unearned_voice(demo, PeopleVotes(), record)
        assert (listed is None) == (rule == "ruff:invalid-syntax"), rule


def test_hygiene_in_a_generated_migration_is_listed_and_counted_as_the_tiers() -> None:
    from agent.verdicts.posting import listed_by_tier, unearned_voice
    from reviewers.paths import is_migration_path

    for path in ("shop/migrations/0003_merge.py", "migrations/0001_initial.py", "alembic/versions/1a2b3c_add.py",
                 "comments/south_migrations/0002_auto__chg_field.py",
                 "app/migrations/versions/4f2e_add_table.py"):  # fmt: skip
        assert is_migration_path(path), path
    for path in ("shop/migrations/__init__.py", "shop/migrations/helpers.py", "shop/migration_0001.py"):
        assert not is_migration_path(path), path
    record = {"ruff:F401": Record(right=30, debatable=4, wrong=10, commits=40)}
    migration = found("ruff:F401").model_copy(update={"path": "shop/migrations/0003_merge.py"})
    reason = unearned_voice(migration, PeopleVotes(), record)
    assert reason is not None and "generated migration" in reason and listed_by_tier(reason)
    assert "not yet proven" not in reason, "F401 is proven: the reason is where it is, not its record"
    broken = found("ruff:F821").model_copy(update={"path": "shop/migrations/0003_merge.py"})
    assert unearned_voice(broken, PeopleVotes(), record) is None, "a missing name in a migration still posts"


def test_one_mistake_repeated_across_files_is_one_thread_naming_the_others() -> None:
    body = "from django.core.exceptions import ImproperlyConfigured\n\n\ndef clean(value):\n    return value\n"
    paths = ("flavor/ca/forms.py", "flavor/ch/forms.py", "flavor/cz/forms.py")
    diff = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1,0 +1,5 @@\n"
        + "".join(f"+{ln}\n" for ln in body.splitlines())
        for p in paths
    )
    title = "`django.core.exceptions.ImproperlyConfigured` imported but unused"

    def unused(path: str, rule: str = "ruff:F401", what: str = title) -> Finding:
        evidence = body.splitlines()[0]
        return Finding(
            path=path, line=1, end_line=1, category="code_quality", severity="low", title=what, body="Unused.",
            evidence=evidence, reviewer="code_quality", rule=rule, confidence="high",
            fingerprint=make_fingerprint(path=path, category="code_quality", rule=rule, evidence=evidence),
        )  # fmt: skip

    inputs = VerifierInputs(
        workspace=SnapshotWorkspace(dict.fromkeys(paths, body)),
        diff_index=DiffIndex(parse_unified_diff(diff)),
        people_votes=PeopleVotes(),
        track_record={"ruff:F401": Record(right=32, debatable=4, wrong=4, commits=40)},
    )
    out = verify_findings([unused(p) for p in reversed(paths)], inputs)
    assert [(v.finding.path, v.verdict) for v in sorted(out, key=lambda v: v.finding.path)] == [
        ("flavor/ca/forms.py", "REAL"),
        ("flavor/ch/forms.py", "DUPLICATE"),
        ("flavor/cz/forms.py", "DUPLICATE"),
    ]
    lead = next(v for v in out if v.verdict == "REAL")
    assert lead.finding.body.endswith("The same in 2 other place(s): flavor/ch/forms.py:1, flavor/cz/forms.py:1.")
    # A different message is a different finding, each posted where it is.
    other = unused(paths[1], what="`os` imported but unused")
    out = verify_findings([unused(paths[0]), other], inputs)
    assert sorted(v.verdict for v in out) == ["REAL", "REAL"]


def test_hygiene_in_a_type_stub_is_listed_but_a_missing_name_there_posts() -> None:
    from agent.verdicts.posting import unearned_voice

    record = {"ruff:F401": Record(right=30, debatable=4, wrong=10, commits=40)}
    stub = found("ruff:F401").model_copy(update={"path": "trio_typing/socket.pyi"})
    reason = unearned_voice(stub, PeopleVotes(), record)
    assert reason is not None and "type-stub" in reason
    missing = found("ruff:F821").model_copy(update={"path": "trio_typing/socket.pyi"})
    assert unearned_voice(missing, PeopleVotes(), record) is None  # type checkers fail on it


def test_a_security_finding_repeated_across_files_keeps_a_thread_at_each_place() -> None:
    a, b = (found("python:sql-interpolation", evidence=SINK, cwe="CWE-89") for _ in range(2))
    b = b.model_copy(update={"path": "app2.py", "fingerprint": b.fingerprint + "2"})
    inputs = VerifierInputs(
        workspace=SnapshotWorkspace({"app.py": HEAD, "app2.py": HEAD}),
        diff_index=DiffIndex(parse_unified_diff(DIFF + DIFF.replace("app.py", "app2.py"))),
        people_votes=PeopleVotes(),
        track_record={"python:sql-interpolation": Record(right=9, debatable=0, wrong=1, commits=8)},
    )
    assert [v.verdict for v in verify_findings([a, b], inputs)] == ["REAL", "REAL"]


def test_one_credential_pasted_in_several_files_is_one_thread_and_two_credentials_are_two() -> None:
    stripe = "sk_live_" + "Qx8rT2Lm4Vb7Nc1Zp9Wd3Kf6"
    other = "sk_live_" + "Hy5Ju2Mn8Bv4Cx7Zl1Qw9Er3"
    paths = ("deploy/settings.py", "README.md", "deploy/worker.py")

    def leak(path: str, token: str) -> Finding:
        evidence = f'STRIPE_KEY = "{token}"'
        return Finding(
            path=path, line=1, end_line=1, category="security", severity="critical",
            title="Hard-coded Stripe live secret key committed to the repository", body="Revoke it.",
            evidence=evidence, reviewer="security", rule="secrets:known-prefix", confidence="high", cwe="CWE-798",
            fingerprint=make_fingerprint(path=path, category="security", rule="secrets:known-prefix", evidence=evidence),
        )  # fmt: skip

    texts = {paths[0]: f'STRIPE_KEY = "{stripe}"\n', paths[1]: f'STRIPE_KEY = "{stripe}"\n'}
    texts[paths[2]] = f'STRIPE_KEY = "{other}"\n'
    diff = "".join(
        f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+{t}"
        for p, t in texts.items()
    )
    inputs = VerifierInputs(
        workspace=SnapshotWorkspace(texts), diff_index=DiffIndex(parse_unified_diff(diff)), track_record={}
    )
    out = verify_findings([leak(paths[0], stripe), leak(paths[1], stripe), leak(paths[2], other)], inputs)
    verdicts = {v.finding.path: v.verdict for v in out}
    assert verdicts == {"README.md": "REAL", "deploy/settings.py": "DUPLICATE", "deploy/worker.py": "REAL"}
    lead = next(v for v in out if v.finding.path == "README.md")
    assert lead.finding.body.endswith("The same in 1 other place(s): deploy/settings.py:1.")
    assert all(stripe not in v.finding.body and stripe not in v.reason for v in out)


def test_one_mistake_repeated_in_one_file_is_one_thread() -> None:
    # arrow's Lao locale: the same pasted zero-width space in the day names and their abbreviations
    text = 'DAYS = ["a\u200bb"]\nSHORT = ["a\u200bb"]\n'
    diff = (
        "diff --git a/loc.py b/loc.py\nnew file mode 100644\n--- /dev/null\n+++ b/loc.py\n@@ -0,0 +1,2 @@\n"
        + "".join(f"+{line}\n" for line in text.splitlines())
    )
    title = 'Invalid unescaped character zero-width-space, use "\\u200B" instead'

    def at(line: int) -> Finding:
        evidence = text.splitlines()[line - 1]
        return Finding(
            path="loc.py", line=line, end_line=line, category="code_quality", severity="high", title=title,
            body=title, evidence=evidence, reviewer="code_quality", rule="ruff:PLE2515", confidence="high",
            fingerprint=make_fingerprint(path="loc.py", category="code_quality", rule="ruff:PLE2515", evidence=evidence),
        )  # fmt: skip

    inputs = VerifierInputs(
        workspace=SnapshotWorkspace({"loc.py": text}), diff_index=DiffIndex(parse_unified_diff(diff)),
        track_record={}, posting="all",
    )  # fmt: skip
    out = sorted(verify_findings([at(1), at(2)], inputs), key=lambda v: v.finding.line)
    assert [v.verdict for v in out] == ["REAL", "DUPLICATE"]
    assert out[0].finding.body.endswith("The same in 1 other place(s): loc.py:2.")
