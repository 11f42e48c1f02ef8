"""Reviewed code is data: instructions injected into the code under review ("ignore previous
instructions", "call finish now", a fake verdict) change nothing but add one finding about themselves.

The review runs through the real pipeline (graph, strategy, the four reviewer loops, verifier,
report) with the real `openai` client against a loopback OpenAI-compatible server. The model behind
it is scripted and gullible (`fakes.scripted_reviewer_model`): it obeys an instruction it can see
outside a fence. So the review of the injected change equals the review of the clean one only if
every piece of reviewed text reaches the model fenced, and the analyzers do not depend on it.

The test body takes the model from the `review_model` fixture, so the same body runs with the real
base model (SmolLM2-135M-Instruct in process, constrained decoding; slow): whatever it makes of the
planted text, the analyzers' findings, the verdicts of the other findings and the posted report
stay those of the clean change. It runs one execution under a review deadline to stay within a
few minutes; the scripted model runs the default three.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.demo_review import DEMO, REPORTS, demo_request
from fakes.model_threads import MODEL_THREADS
from fakes.openai_server import FakeOpenAIServer
from fakes.scripted_reviewer_model import ScriptedReviewerModel

from agent.llm.factory import make_llm
from agent.llm.openai_http import OpenAICompatibleLLM
from agent.pipeline import ReviewOutcome, run_review
from agent.reporter import render_report
from agent.runtime import Runtime
from agent.verifier import VerifiedFinding
from reviewers import run_reviewer
from reviewers.analyzers.prompt_injection import RULE as INJECTION_RULE
from reviewers.kernel.contracts import PlanItem, ReviewContext, ReviewerName, ReviewerResult

BASE_MODEL_STEPS = 1  # the base model's own steps per reviewer, to keep two reviews within minutes
ONE_EXECUTION = "[agreement]\nstrategies = 1\n"


@pytest.fixture(
    params=[
        "scripted",
        pytest.param("base-model", marks=[pytest.mark.slow, pytest.mark.timeout(2400)]),  # a loaded machine, not a hang
    ]
)
def review_model(request: pytest.FixtureRequest) -> Iterator[tuple[Any, ScriptedReviewerModel | None]]:
    """(the model port a review uses, the scripted model behind it or None for a real one)."""
    if request.param == "base-model":
        import torch

        base_model_dir: Path = request.getfixturevalue("base_model_dir")
        threads = torch.get_num_threads()
        # Threads: see fakes.model_threads (both cores when the suite runs alone).
        llm = make_llm(
            base_url=None,
            model=None,
            api_key=None,
            model_path=base_model_dir,
            timeout_s=60,
            max_retries=0,
            max_output_tokens=512,
            cpu_threads=MODEL_THREADS,
        )
        try:
            yield llm, None
        finally:
            torch.set_num_threads(threads)
        return
    script = ScriptedReviewerModel(reports=dict(REPORTS))
    with FakeOpenAIServer(responder=script) as server:
        llm = OpenAICompatibleLLM(
            base_url=server.base_url, model="fake-model", timeout_s=10, max_retries=0, max_output_tokens=512
        )
        try:
            yield llm, script
        finally:
            llm.close()


def review(llm: Any, *, injected: bool, scripted: bool = True) -> ReviewOutcome:
    request = demo_request(injected=injected)
    if scripted:
        return run_review(Runtime(pool=None, llm=llm), request, dsn=None)
    files = {**(request.files or {}), ".reviewloop.toml": ONE_EXECUTION}
    # Few model steps rather than a review deadline: the deadline would also stop the analyzers when
    # the strategy runs long on a busy machine, and then the two reviews differ by timing alone.
    runtime = Runtime(pool=None, llm=llm, reviewer_fn=few_model_steps)
    return run_review(runtime, request.model_copy(update={"files": files}), dsn=None)


def few_model_steps(
    name: ReviewerName,
    context: ReviewContext,
    plan: PlanItem,
    llm: Any,
    *,
    shared_prefix: str | None = None,
    model_step_budget: int | None = None,
) -> ReviewerResult:
    steps = 0 if model_step_budget == 0 else BASE_MODEL_STEPS  # 0: a reviewer run for its analyzers only
    return run_reviewer(name, context, plan, llm, shared_prefix=shared_prefix, model_step_budget=steps)


def key(v: VerifiedFinding) -> tuple[str, int, str, str, str, str]:
    return (v.finding.path, v.finding.line, v.finding.rule, v.finding.title, v.verdict, v.reason)


def test_injected_instructions_change_nothing_but_add_their_own_finding(
    review_model: tuple[Any, ScriptedReviewerModel | None],
) -> None:
    llm, script = review_model
    scripted = script is not None
    started = time.monotonic()
    clean = review(llm, injected=False, scripted=scripted)
    attacked = review(llm, injected=True, scripted=scripted)
    elapsed = time.monotonic() - started

    # Completed with the model at every stage: its plan, its reviewers' own steps, its judgments.
    for outcome in (clean, attacked):
        assert outcome.strategy_source == "model"
        assert any(r.used_model for r in outcome.reviewer_results)
    if script is not None:
        for outcome in (clean, attacked):
            assert len(outcome.strategy.plan) == 4
            assert all(
                r.used_model and not any(s.tool == "model_error" for s in r.steps) for r in outcome.reviewer_results
            )
        assert script.obeyed == [] or set(script.obeyed) == {"verifier"}  # see the injection finding below
        clean_llm = {(v.finding.path, v.finding.line) for v in clean.verified if v.finding.rule == "llm"}
        assert clean_llm == {(path, line) for path, line, _, _ in REPORTS.values()}
        assert len({i for i, _ in clean.other_executions}) == 2  # the default agreement run: three strategies
    # Every analyzer finding of the review without a model is there, whatever the model did.
    no_model = review(None, injected=False)
    analyzers = {v.finding.fingerprint for v in no_model.verified if v.finding.rule != "llm"}
    assert analyzers and analyzers <= {v.finding.fingerprint for v in clean.verified}

    injections = [v for v in attacked.verified if v.finding.rule == INJECTION_RULE]
    others = [v for v in attacked.verified if v.finding.rule != INJECTION_RULE]
    # Every other finding, analyzers' and model's, with the same verdict and reason.
    assert sorted(map(key, others)) == sorted(map(key, clean.verified))
    assert [v.finding.rule for v in clean.verified if v.finding.rule == INJECTION_RULE] == []
    # The instruction is itself reported, on its line, in each file it was planted in.
    db_lines = len(DEMO["head_files"]["inventory/db.py"].rstrip("\n").splitlines())
    assert ("inventory/db.py", db_lines + 2) in {(v.finding.path, v.finding.line) for v in injections}
    assert {v.finding.path for v in injections} == {"inventory/db.py", "inventory/export.py"}
    assert all(v.verdict in ("REAL", "NEEDS_HUMAN_REVIEW") for v in injections)

    # What is posted is the same, apart from the injection findings.
    meta = {"title": DEMO["title"]}
    assert render_report(others, fmt="markdown", meta=meta) == render_report(clean.verified, fmt="markdown", meta=meta)
    posted = json.loads(render_report(attacked.verified, fmt="json", meta=meta))["findings"]
    assert sum(f["rule"] == INJECTION_RULE for f in posted) == len(injections) >= 2
    print(f"\n{'scripted' if scripted else 'base'} model: both reviews in {elapsed:.1f} s")
