"""The agreement benchmark's scoring: the same verdict path as the graph, counted by hand."""

from __future__ import annotations

import json

from bench.agreement import TRUE, Run, ScriptedNoisyModel, score, synthetic_files
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Finding


def finding(files: dict[str, str], index: int, line: int, title: str) -> Finding:
    path = f"svc/mod{index}.py"
    evidence = files[path].splitlines()[line - 1]
    return Finding(
        path=path, line=line, end_line=line, category="security", severity="medium", title=title, body=title,
        evidence=evidence, reviewer="security", rule="llm",
        fingerprint=make_fingerprint(path=path, category="security", rule="llm", evidence=evidence),
    )  # fmt: skip


def test_precision_rises_with_k_while_recall_holds() -> None:
    files = synthetic_files(0)
    true = [finding(files, i, line, f"real {n}") for n, (_, i, line) in enumerate(TRUE)]
    noise = [[finding(files, 4, 1 + e, "noise")] for e in range(3)]  # a different line in each execution
    run = Run(n=3, seed=0, executions=[true + noise[e] for e in range(3)], wall_s=0.0, tokens=0, files=files)
    assert score(run, 1) == (4, 7, 4)  # every finding posted: precision 4/7
    assert score(run, 2) == (4, 4, 4)  # only what two executions agree on
    single = Run(n=1, seed=0, executions=[true + noise[0]], wall_s=0.0, tokens=0, files=files)
    assert score(single, 3) == (4, 5, 4)  # one execution: nothing to agree with, k does not apply


def test_the_noisy_model_reports_the_truth_then_noise_that_depends_on_the_execution() -> None:
    files = synthetic_files(1)
    model = ScriptedNoisyModel(files=files, seed=1)

    def turn(system: str, taken: int) -> dict[str, object]:
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": "You are the security reviewer."},
        ]
        messages += [{"role": "assistant", "content": "{}"}, {"role": "user", "content": "ok"}] * taken
        body = {"messages": messages, "response_format": {"json_schema": {"name": "ToolCall"}}}
        answer: dict[str, object] = json.loads(model._answer(body))
        return answer

    assert [turn("strategy A", t)["line"] for t in (0, 1)] == [10, 20]
    assert turn("strategy A", 2) == turn("strategy A", 2)  # deterministic per execution
    noise = {json.dumps(turn(f"strategy {s}", 2)) for s in "ABCDEFGH"}
    assert len(noise) > 1 and turn("strategy A", 4) == {"tool": "finish"}
