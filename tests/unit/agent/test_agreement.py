"""Agreement across diverse strategies: which strategies run, how support is counted, what the verifier
does with it, and the repository's N and k."""

from __future__ import annotations

import numpy as np
import pytest

from agent.agreement import annotate_support, diverse_strategies, execution_step_budget
from agent.diff import DiffIndex, parse_unified_diff
from agent.repo_config import parse_repo_config
from agent.strategy import Strategy
from agent.verifier import VerifierInputs, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import FileChange, Finding, PlanItem, RepoConfig
from reviewers.kernel.errors import ConfigError

HEAD = "import os\n\n\ndef run(cmd):\n    os.system(cmd)\n    return cmd\n"
DIFF = """diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -3,3 +3,4 @@ import os
 
 def run(cmd):
+    os.system(cmd)
     return cmd
"""


def finding(line: int, title: str, *, rule: str = "llm", evidence: str = "    os.system(cmd)") -> Finding:
    return Finding(
        path="app.py",
        line=line,
        end_line=line,
        category="security",
        severity="high",
        title=title,
        body=title,
        evidence=evidence,
        reviewer="security",
        rule=rule,
        fingerprint=make_fingerprint(path="app.py", category="security", rule=rule, evidence=evidence, title=title),
    )


def support(findings: list[Finding]) -> dict[str, tuple[int, int, int] | None]:
    return {
        f.title: (f.agreement.support, f.agreement.executions, f.agreement.required) if f.agreement else None
        for f in findings
    }


def test_support_counts_executions_that_report_the_same_problem() -> None:
    shell = finding(5, "Shell command built from input")
    # the same line in other words, quoting more of the code: the same problem
    reworded = finding(5, "Shell command built from user input", evidence="    os.system(cmd)\n    return cmd")
    other = finding(5, "Leaked file handle", evidence="os.system")  # the same line, another problem
    analyzer = finding(5, "os.system call", rule="bandit:B605")
    executions = [[shell, other, analyzer], [reworded, analyzer], [shell.model_copy(), analyzer]]
    merged = annotate_support(executions, min_support=2)
    assert support(merged) == {
        "os.system call": None,  # analyzers are deterministic: agreement says nothing about them
        "Shell command built from input": (3, 3, 2),  # the earliest report stands for all three
        "Leaked file handle": (1, 3, 2),
    }
    # One execution, or N = 1: nothing is annotated, findings pass through.
    assert support(annotate_support([[shell, other]], min_support=2)) == {
        "Shell command built from input": None,
        "Leaked file handle": None,
    }
    # k above the executions that ran: all of them are required.
    assert support(annotate_support([[shell], [other]], min_support=3))["Leaked file handle"] == (1, 2, 2)


def test_close_text_by_embedding_when_an_embedder_is_given() -> None:
    class Fixed:
        def embed(self, texts: list[str]) -> np.ndarray:
            # "injection" texts point one way, the rest another
            return np.array([[1.0, 0.0] if "injection" in t else [0.0, 1.0] for t in texts], dtype=np.float32)

    a = finding(5, "Command injection")
    b = finding(5, "Possible injection via cmd", evidence="os.system(cmd)\n")
    c = finding(5, "Unvalidated command", evidence="os.system")
    merged = annotate_support([[a], [b], [c]], min_support=2, embedder=Fixed())
    assert support(merged) == {"Command injection": (2, 3, 2), "Unvalidated command": (1, 3, 2)}


def test_the_verifier_sends_unsupported_model_findings_to_a_human() -> None:
    files = parse_unified_diff(DIFF)
    # posting="all": an analyzer rule nobody has judged would otherwise be listed (test_posting.py)
    inputs = VerifierInputs(workspace=SnapshotWorkspace({"app.py": HEAD}), diff_index=DiffIndex(files), posting="all")
    shell = finding(5, "Shell command built from input")
    lonely = finding(4, "Command not validated", evidence="def run(cmd):")
    analyzer = finding(6, "Returns the raw command", rule="quality:raw", evidence="    return cmd")
    merged = annotate_support([[shell, lonely, analyzer], [shell], [analyzer]], min_support=2)
    verdicts = {v.finding.title: (v.verdict, v.reason) for v in verify_findings(merged, inputs)}
    assert verdicts["Shell command built from input"][0] == "REAL"
    assert verdicts["Returns the raw command"][0] == "REAL"  # an analyzer's: never demoted for want of agreement
    assert verdicts["Command not validated"] == (
        "NEEDS_HUMAN_REVIEW",
        "reported by 1 of 3 independent reviews (different strategies); 2 needed",
    )


def change(path: str) -> FileChange:
    return FileChange(path=path, old_path=path, status="modified")


def test_diverse_strategies_keep_the_greedy_one_first_and_the_most_different_others() -> None:
    files = [change("app/a.py"), change("app/b.py"), change("docs/x.md")]
    base = Strategy(
        change_type="feature",
        plan=[
            PlanItem(reviewer="security", focus_paths=["app/a.py", "app/b.py"], step_budget=6),
            PlanItem(reviewer="code_quality", focus_paths=["app/a.py"], step_budget=4),
        ],
        stop_condition="done",
    )
    kept = diverse_strategies(base, llm=None, s1="", files=files, config=RepoConfig(), n=3)
    assert kept[0] == base and len(kept) == 3
    assert len({z.to_json() for z in kept}) == 3 and all(z.plan for z in kept)
    assert diverse_strategies(base, llm=None, s1="", files=files, config=RepoConfig(), n=1) == [base]
    assert [execution_step_budget(b, 3) for b in (1, 3, 6, 7)] == [1, 1, 2, 2]


def test_n_and_k_come_from_the_repository_config() -> None:
    assert (RepoConfig().agreement.strategies, RepoConfig().agreement.min_support) == (3, 2)
    config = parse_repo_config("[agreement]\nstrategies = 5\nmin_support = 3\n")
    assert (config.agreement.strategies, config.agreement.min_support) == (5, 3)
    assert parse_repo_config("[agreement]\nstrategies = 1\n").agreement.strategies == 1  # a single execution
    with pytest.raises(ConfigError, match="agreement.strategies"):
        parse_repo_config("[agreement]\nstrategies = 0\n")


def test_an_embedder_that_fails_falls_back_to_word_overlap() -> None:
    from agent.graph import findings_by_agreement
    from reviewers.kernel.errors import TrainingError

    class Broken:
        def embed(self, texts: object) -> object:
            raise TrainingError("no MiniLM here")

    shell = finding(5, "Shell command built from input")
    reworded = finding(5, "Shell command built from user input", evidence="os.system(cmd)\n")
    state = {
        "executions": [{}, {}],
        "reviewer_results": [
            {"execution": 0, "findings": [shell.model_dump(mode="json")]},
            {"execution": 1, "findings": [reworded.model_dump(mode="json")]},
        ],
    }
    [merged] = findings_by_agreement(state, 2, Broken())  # type: ignore[arg-type]
    assert merged.agreement is not None and merged.agreement.support == 2
