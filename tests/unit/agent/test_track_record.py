"""A rule mostly wrong on held-out history goes to a person until the project's people accept it."""

from agent.diff import DiffIndex, parse_unified_diff
from agent.verdicts.feedback import PeopleVotes
from agent.verdicts.track_record import MIN_JUDGED, Record, load_track_record, poor_record, shipped_track_record
from agent.verifier import VerifierInputs, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Finding

HEAD = "import os\n\n\ndef run(cmd):\n    try:\n        os.remove(cmd)\n    except Exception:\n        pass\n"
DIFF = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -3,2 +3,6 @@ import os
 
 def run(cmd):
+    try:
+        os.remove(cmd)
+    except Exception:
+        pass
"""
EVIDENCE = "    except Exception:"


def blind_except(rule: str = "ruff:BLE001") -> Finding:
    return Finding(
        path="app.py",
        line=7,
        end_line=7,
        category="code_quality",
        severity="medium",
        title="Do not catch blind exception",
        body="Catch what the code can handle.",
        evidence=EVIDENCE,
        reviewer="code_quality",
        rule=rule,
        fingerprint=make_fingerprint(path="app.py", category="code_quality", rule=rule, evidence=EVIDENCE),
    )


def verdict_of(finding: Finding, record: dict[str, Record], votes: PeopleVotes | None = None) -> tuple[str, str]:
    inputs = VerifierInputs(
        workspace=SnapshotWorkspace({"app.py": HEAD}),
        diff_index=DiffIndex(parse_unified_diff(DIFF)),
        people_votes=votes or PeopleVotes(),
        track_record=record,
        posting="all",  # the record alone; the posting tiers have their own tests (test_posting.py)
    )
    [v] = verify_findings([finding], inputs)
    return v.verdict, v.reason


def test_a_rule_mostly_wrong_on_held_out_history_goes_to_a_person_with_its_record() -> None:
    verdict, reason = verdict_of(blind_except(), {"ruff:BLE001": Record(right=1, debatable=1, wrong=6, commits=3)})
    assert verdict == "NEEDS_HUMAN_REVIEW"
    assert reason == (
        "ruff:BLE001 was right in 1 of 8 findings judged on open-source history it had not been tuned to,"
        " 1 debatable; listed for a person until 3 people on this project accept it"
        # right or debatable in fewer than half: counted in the summary, not listed (issue 39, item 6)
        "; usually wrong here: ruff:BLE001 was right or debatable in 2 of 8 findings judged on open-source"
        " history; counted in the summary, shown with --all"
    )


def test_a_high_or_critical_finding_of_a_usually_wrong_rule_is_listed_by_name_not_folded() -> None:
    """Issue 40, H2: a high finding held for a person (a shell injection among them) stays named in the
    merge request's summary, where no `--all` reaches; only lower severities fold into the count."""
    from agent.verdicts.track_record import folded

    record = {"ruff:BLE001": Record(right=1, debatable=1, wrong=6, commits=3)}
    verdict, reason = verdict_of(blind_except().model_copy(update={"severity": "high"}), record)
    assert verdict == "NEEDS_HUMAN_REVIEW" and not folded(reason), reason
    assert not folded(verdict_of(blind_except().model_copy(update={"severity": "critical"}), record)[1])
    for severity in ("medium", "low"):
        assert folded(verdict_of(blind_except().model_copy(update={"severity": severity}), record)[1]), severity


def test_a_rule_right_often_enough_or_judged_too_seldom_still_posts() -> None:
    assert verdict_of(blind_except(), {"ruff:BLE001": Record(right=7, debatable=0, wrong=3, commits=3)})[0] == "REAL"
    # the bar is the product's promise for what it posts (70 % right): a rule just under it is listed
    under = Record(right=6, debatable=1, wrong=3, commits=3)
    assert verdict_of(blind_except(), {"ruff:BLE001": under})[0] == "NEEDS_HUMAN_REVIEW"
    seldom = Record(right=0, debatable=0, wrong=MIN_JUDGED - 1, commits=MIN_JUDGED - 1)
    assert verdict_of(blind_except(), {"ruff:BLE001": seldom})[0] == "REAL"
    one_cause = Record(right=0, debatable=0, wrong=5, commits=1)  # five findings of one commit: one observation
    assert verdict_of(blind_except(), {"ruff:BLE001": one_cause})[0] == "REAL"
    assert verdict_of(blind_except(), {"ruff:S110": Record(right=0, debatable=0, wrong=9, commits=3)})[0] == "REAL"


def test_the_projects_people_can_vouch_for_a_rule_and_one_vote_short_cannot() -> None:
    record = {"ruff:BLE001": Record(right=0, debatable=0, wrong=9, commits=3)}
    vouched = PeopleVotes(by_rule={"ruff:BLE001": (1, 3)})
    assert verdict_of(blind_except(), record, vouched)[0] == "REAL"
    too_few = PeopleVotes(by_rule={"ruff:BLE001": (0, 2)})
    assert verdict_of(blind_except(), record, too_few)[0] == "NEEDS_HUMAN_REVIEW"
    split = PeopleVotes(by_rule={"ruff:BLE001": (4, 4)})
    assert verdict_of(blind_except(), record, split)[0] == "NEEDS_HUMAN_REVIEW"


def test_the_shipped_record_is_what_the_verifier_uses_by_default() -> None:
    shipped = shipped_track_record()
    assert shipped == load_track_record()
    poor = sorted(rule for rule, record in shipped.items() if poor_record(record))
    assert poor, "the shipped record holds no rule back; regenerate it with python -m bench.history --track-record"
    rule = poor[0]
    inputs = VerifierInputs(
        workspace=SnapshotWorkspace({"app.py": HEAD}), diff_index=DiffIndex(parse_unified_diff(DIFF)), posting="all"
    )
    [v] = verify_findings([blind_except(rule)], inputs)
    assert v.verdict == "NEEDS_HUMAN_REVIEW", v.reason
    assert rule in v.reason


def test_a_critical_finding_posts_whatever_its_rules_record() -> None:
    critical = blind_except().model_copy(update={"severity": "critical"})
    assert verdict_of(critical, {"ruff:BLE001": Record(right=0, debatable=0, wrong=9, commits=9)})[0] == "REAL"


def test_a_ruff_rule_judged_too_seldom_is_judged_by_its_family() -> None:
    family = {
        "ruff:BLE002": Record(right=1, debatable=0, wrong=4, commits=4),
        "ruff:BLE003": Record(right=0, debatable=1, wrong=3, commits=2),
    }
    verdict, reason = verdict_of(blind_except(), family)  # BLE001 itself never judged
    assert verdict == "NEEDS_HUMAN_REVIEW"
    assert reason.startswith("ruff:BLE001's family (ruff:BLE*) was right in 1 of 9 findings judged")
    # its own record, once it has one, is what counts
    own = family | {"ruff:BLE001": Record(right=3, debatable=0, wrong=1, commits=3)}
    assert verdict_of(blind_except(), own)[0] == "REAL"
    # another family's record says nothing about it, nor does a rule of another analyzer
    assert verdict_of(blind_except(), {"ruff:S110": Record(right=0, debatable=0, wrong=9, commits=3)})[0] == "REAL"
    assert verdict_of(blind_except("bandit:B110"), {"bandit:B112": Record(0, 0, 9, 3)})[0] == "REAL"
