"""Agreement across diverse strategies, measured: precision and recall of the model's findings for
N executions and a support threshold k, with the tokens and wall time a review costs.

The model is scripted (`ScriptedNoisyModel`, on loopback behind the real OpenAI client): in every
execution each reviewer reports the merge request's fixed true problems (while its step budget
lasts) plus `FALSE_PER_EXECUTION` false ones at random changed lines, drawn afresh per execution —
the noise of a model that is right about what is there and inventive about the rest. Each review
runs through `run_review` (graph, diverse strategies, the reviewers under each, verifier); the
verdicts for each k come from the same `annotate_support` and `verify_findings` the graph uses, over
that review's executions. Tokens are the characters the server received and sent, over four.

    python -m bench.agreement          # prints the table
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from agent.agreement import annotate_support
from agent.context import ReviewRequest
from agent.diff import DiffIndex, parse_unified_diff
from agent.llm.openai_http import OpenAICompatibleLLM
from agent.pipeline import ReviewOutcome, run_review
from agent.runtime import Runtime
from agent.strategy import Strategy
from agent.verifier import VerifierInputs, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from bench.fake_llm_server import DelayedLLMServer
from bench.report import fmt, table
from reviewers.kernel.contracts import Finding, PlanItem, ReviewerName

NS = (1, 3, 5)
KS = (1, 2, 3)
SEEDS = 6  # merge requests (seeds) per N
FILES = 6
LINES_PER_FILE = 40
STEP_BUDGET = 20  # per reviewer: with N = 5 each execution still has 4 model steps (2 true + 2 false)
FALSE_PER_EXECUTION = 2  # per reviewer and execution
CHARS_PER_TOKEN = 4
REVIEWERS: tuple[ReviewerName, ...] = ("security", "code_quality")
# The true problems: (reviewer, file index, line). Two per reviewer.
TRUE = (("security", 0, 10), ("security", 1, 20), ("code_quality", 2, 5), ("code_quality", 3, 30))
FALSE_TITLES = (
    "Possible race on this value",
    "Magic number should be a constant",
    "Unclear variable name",
    "Missing input validation",
    "Potential integer overflow",
    "Consider caching this result",
)


def synthetic_files(seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return {
        f"svc/mod{i}.py": "".join(f"value_{i}_{n} = {rng.randint(0, 999)}\n" for n in range(1, LINES_PER_FILE + 1))
        for i in range(FILES)
    }


def added_diff(files: dict[str, str]) -> str:
    out: list[str] = []
    for path, text in files.items():
        lines = text.splitlines()
        out += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
        out += [f"@@ -0,0 +1,{len(lines)} @@", *(f"+{line}" for line in lines)]
    return "\n".join(out) + "\n"


class ScriptedNoisyModel(DelayedLLMServer):
    """True findings always, random false ones per execution; counts the characters it sees."""

    def __init__(self, *, files: dict[str, str], seed: int) -> None:
        plan = [PlanItem(reviewer=r, focus_paths=[], checks="everything", step_budget=STEP_BUDGET) for r in REVIEWERS]
        super().__init__(delay_s=0.0, strategy=Strategy(change_type="feature", plan=plan, stop_condition="done"))
        self.files = files
        self.seed = seed
        self.chars = 0

    def _answer(self, body: dict[str, Any]) -> str:
        answer = self._script(body)
        with self._lock:
            self.chars += len(json.dumps(body.get("messages", []))) + len(answer)
        return answer

    def _script(self, body: dict[str, Any]) -> str:
        if self.kind_of(body) != "ToolCall":
            return super()._answer(body)
        messages = list(body.get("messages") or [])
        task = str(messages[1].get("content", "")) if len(messages) > 1 else ""
        reviewer = next((r for r in REVIEWERS if f"You are the {r.replace('_', '-')} reviewer" in task), None)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if reviewer is None:
            return json.dumps({"tool": "finish"})
        true = [(i, line) for r, i, line in TRUE if r == reviewer]
        if turn < len(true):
            return self._report(*true[turn], title=f"Real problem {reviewer} {turn}")
        if turn >= len(true) + FALSE_PER_EXECUTION:
            return json.dumps({"tool": "finish"})
        # The execution is told apart by its strategy, which is in the shared prefix.
        key = f"{self.seed}|{messages[0].get('content', '')}|{reviewer}|{turn}"
        rng = random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))
        return self._report(rng.randrange(FILES), rng.randint(1, LINES_PER_FILE), title=rng.choice(FALSE_TITLES))

    def _report(self, index: int, line: int, *, title: str) -> str:
        path = f"svc/mod{index}.py"
        evidence = self.files[path].splitlines()[line - 1]
        call = {"tool": "report", "path": path, "line": line, "severity": "medium", "title": title}
        return json.dumps({**call, "body": title, "evidence": evidence})


@dataclass
class Run:
    n: int
    seed: int
    executions: list[list[Finding]]
    wall_s: float
    tokens: int
    files: dict[str, str]


def review_once(n: int, seed: int) -> Run:
    files = synthetic_files(seed)
    request = ReviewRequest(
        source="replay",
        title=f"Add modules ({seed})",
        diff_text=added_diff(files),
        files={**files, ".reviewloop.toml": f"[agreement]\nstrategies = {n}\nmin_support = 1\n"},
    )
    server = ScriptedNoisyModel(files=files, seed=seed)
    with server:
        llm = OpenAICompatibleLLM(
            base_url=server.base_url, model="bench", timeout_s=30, max_retries=0, max_output_tokens=256
        )
        try:
            started = time.perf_counter()
            outcome = run_review(Runtime(pool=None, llm=llm), request, dsn=None)
            wall = time.perf_counter() - started
        finally:
            llm.close()
    return Run(n, seed, executions_of(outcome), wall, server.chars // CHARS_PER_TOKEN, files)


def executions_of(outcome: ReviewOutcome) -> list[list[Finding]]:
    count = 1 + len({i for i, _ in outcome.other_executions})
    out: list[list[Finding]] = [[] for _ in range(count)]
    out[0] = [f for r in outcome.reviewer_results for f in r.findings]
    for index, result in outcome.other_executions:
        out[index] += result.findings
    return out


def score(run: Run, k: int) -> tuple[int, int, int]:
    """(true findings posted, findings posted, true findings there are) among the model's findings."""
    changes = parse_unified_diff(added_diff(run.files))
    inputs = VerifierInputs(workspace=SnapshotWorkspace(run.files), diff_index=DiffIndex(changes))
    merged = annotate_support(run.executions, min_support=k) if len(run.executions) > 1 else run.executions[0]
    posted = [v.finding for v in verify_findings(merged, inputs) if v.verdict == "REAL" and v.finding.rule == "llm"]
    truth = {(f"svc/mod{i}.py", line) for _, i, line in TRUE}
    hits = {(f.path, f.line) for f in posted} & truth
    return len(hits), len(posted), len(truth)


def run(*, ns: tuple[int, ...] = NS, ks: tuple[int, ...] = KS, seeds: int = SEEDS) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n in ns:
        runs = [review_once(n, seed) for seed in range(seeds)]
        executions = statistics.mean(len(r.executions) for r in runs)
        for k in ks:
            scores = [score(r, k) for r in runs]
            hits, posted, truth = (sum(s[i] for s in scores) for i in range(3))
            rows.append(
                {
                    "n": n,
                    "k": k,
                    "executions": executions,
                    "precision": hits / posted if posted else float("nan"),
                    "recall": hits / truth,
                    "posted_per_review": posted / seeds,
                    "tokens_per_review": statistics.median(r.tokens for r in runs),
                    "wall_s_per_review": statistics.median(r.wall_s for r in runs),
                }
            )
    return rows


def render(rows: list[dict[str, Any]], *, seeds: int = SEEDS) -> str:
    return "\n".join(
        [
            "### Agreement across diverse strategies (scripted noisy model)",
            "",
            f"bench/agreement.py: {seeds} synthetic merge requests per N ({FILES} new files of {LINES_PER_FILE} "
            f"lines, nothing for the analyzers); two reviewers, step budget {STEP_BUDGET} each, shared by the "
            f"N executions. Per execution each reviewer reports the MR's 2 true problems and {FALSE_PER_EXECUTION} "
            "false ones at random changed lines. A model finding is posted (REAL) when at least k executions "
            "report it; with N = 1 nothing is counted (k does not apply). Tokens: characters sent and received "
            "over 4; wall time: the whole `run_review` on loopback (no model delay).",
            "",
            table(
                ["N", "k", "executions run", "precision", "recall", "posted / review", "tokens / review", "wall (s)"],
                [
                    (
                        r["n"],
                        r["k"],
                        fmt(r["executions"]),
                        fmt(r["precision"]),
                        fmt(r["recall"]),
                        fmt(r["posted_per_review"]),
                        f"{r['tokens_per_review']:,.0f}",
                        fmt(r["wall_s_per_review"]),
                    )
                    for r in rows
                ],
            ),
        ]
    )


if __name__ == "__main__":
    print(render(run()))
