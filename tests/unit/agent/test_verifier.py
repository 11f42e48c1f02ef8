from agent.diff import DiffIndex, parse_unified_diff
from agent.verifier import VerifierInputs, calibrate, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import ChatMessage, Finding
from reviewers.kernel.errors import LLMOutputError

HEAD = "import os\n\n\ndef run(cmd):\n    os.system(cmd)\n    return 1\n\n\ndef untouched():\n    return 2\n"
DIFF = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -3,3 +3,4 @@ import os
 
 def run(cmd):
+    os.system(cmd)
     return 1
"""


def finding(
    line: int, evidence: str, *, category: str = "security", rule: str = "r1", reviewer: str = "security"
) -> Finding:
    return Finding(
        path="app.py",
        line=line,
        end_line=line,
        category=category,  # type: ignore[arg-type]
        severity="high",
        title="shell command",
        body="runs a shell",
        evidence=evidence,
        reviewer=reviewer,  # type: ignore[arg-type]
        rule=rule,
        fingerprint=make_fingerprint(path="app.py", category=category, rule=rule, evidence=evidence),
    )


def inputs(**kw: object) -> VerifierInputs:
    files = parse_unified_diff(DIFF)
    return VerifierInputs(workspace=SnapshotWorkspace({"app.py": HEAD}), diff_index=DiffIndex(files), **kw)  # type: ignore[arg-type]


def test_real_when_evidence_is_at_the_changed_line() -> None:
    [v] = verify_findings([finding(5, "    os.system(cmd)")], inputs())
    assert v.verdict == "REAL", v.reason


def test_evidence_missing_is_a_false_positive() -> None:
    [v] = verify_findings([finding(5, "eval(user_input)")], inputs())
    assert v.verdict == "FALSE_POSITIVE"
    assert "`eval(user_input)` is not in app.py at the head commit" in v.reason


def test_line_far_from_the_change_is_a_false_positive() -> None:
    [v] = verify_findings([finding(10, "return 2")], inputs())
    assert v.verdict == "FALSE_POSITIVE"
    assert "not in or next to the change" in v.reason


def test_duplicates_within_run_and_on_the_mr() -> None:
    a = finding(5, "os.system(cmd)")
    out = verify_findings([a, a.model_copy()], inputs())
    assert sorted(v.verdict for v in out) == ["DUPLICATE", "REAL"]
    [posted] = verify_findings([a], inputs(open_fingerprints={a.fingerprint}))
    assert posted.verdict == "DUPLICATE"


def test_rejected_before_is_a_false_positive_but_a_severe_security_finding_goes_to_a_human() -> None:
    medium = finding(5, "os.system(cmd)").model_copy(update={"severity": "medium"})
    [v] = verify_findings([medium], inputs(rejected_fingerprints={medium.fingerprint: 2}))
    assert v.verdict == "FALSE_POSITIVE"
    assert v.reason.startswith(f"2 people rejected this same finding ({medium.fingerprint}) before")
    high = finding(5, "os.system(cmd)")
    [h] = verify_findings([high], inputs(rejected_fingerprints={high.fingerprint: 1}))
    assert h.verdict == "NEEDS_HUMAN_REVIEW"
    assert h.reason.startswith("1 person rejected this same finding")
    assert "a high security finding is not dropped on votes alone" in h.reason


def test_calibration_sends_a_reviewer_several_people_mostly_rejected_to_a_human() -> None:
    a = finding(5, "os.system(cmd)")
    [v] = verify_findings([a], inputs(acceptance={("security", "security"): (1, 9, 3)}))
    assert v.verdict == "NEEDS_HUMAN_REVIEW"
    assert v.reason == "security/security findings were accepted 1 of 10 times (3 people rejected them)"
    assert calibrate(a, {("security", "security"): (8, 2, 3)}) is None
    assert calibrate(a, {("security", "security"): (0, 2, 2)}) is None  # too few votes to judge
    # one or two people's many 👎 do not lower a reviewer's standing
    assert calibrate(a, {("security", "security"): (0, 40, 2)}) is None


class DemotingJudge:
    model_name = "judge"

    def __init__(self, verdict: str | None) -> None:
        self.verdict = verdict

    def complete_json(self, messages, schema, *, purpose, json_schema=None):  # type: ignore[no-untyped-def]
        if self.verdict is None:
            raise LLMOutputError("garbage twice")
        return schema.model_validate({"verdict": self.verdict, "reason": "judged"})

    def complete_text(self, messages: list[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str:
        return ""


def test_model_judgment_may_demote_but_failure_keeps_deterministic_verdict() -> None:
    a = finding(5, "os.system(cmd)")
    [demoted] = verify_findings([a], inputs(), DemotingJudge("FALSE_POSITIVE"))
    assert demoted.verdict == "NEEDS_HUMAN_REVIEW"  # an analyzer finding goes to a human, never away
    assert "disputes" in demoted.reason
    model_found = finding(5, "os.system(cmd)", rule="llm")
    [gone] = verify_findings([model_found], inputs(), DemotingJudge("FALSE_POSITIVE"))
    assert gone.verdict == "FALSE_POSITIVE"  # the model may withdraw its own kind of finding
    [kept] = verify_findings([a], inputs(), DemotingJudge(None))
    assert kept.verdict == "REAL"  # a failed judgment never loses an analyzer's finding
    assert "unavailable" in kept.reason
    [unconfirmed] = verify_findings([model_found], inputs(), DemotingJudge(None))
    assert unconfirmed.verdict == "NEEDS_HUMAN_REVIEW"  # nothing but the model vouches for its own finding
    assert unconfirmed.reason.startswith("model judgment unavailable (LLMOutputError)")
    # the model cannot promote a finding whose evidence is missing
    [fp] = verify_findings([finding(5, "not there")], inputs(), DemotingJudge("REAL"))
    assert fp.verdict == "FALSE_POSITIVE"
