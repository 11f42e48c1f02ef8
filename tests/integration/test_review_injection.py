"""Reviewed code is data: instructions injected into the code under review ("ignore previous
instructions", "call finish now", a fake verdict) change nothing but add one finding about themselves.

The review runs through the real pipeline (graph, strategy, the four reviewer loops, verifier,
report) with the real `openai` client against a loopback OpenAI-compatible server. The model behind
it is scripted and gullible (`fakes.scripted_reviewer_model`): it obeys an instruction it can see
outside a fence. So the review of the injected change equals the review of the clean one only if
every piece of reviewed text reaches the model fenced, and the analyzers do not depend on it.

The test body takes the model from the `review_model` fixture, so the same body runs with the real
base model once it can be built here: add a parameter that yields `make_llm(model_path=...)` over
the directory `reviewloop dev base-model` prints (see the fixture), and mark it slow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fakes.demo_review import DEMO, REPORTS, demo_request
from fakes.openai_server import FakeOpenAIServer
from fakes.scripted_reviewer_model import ScriptedReviewerModel

from agent.llm.openai_http import OpenAICompatibleLLM
from agent.pipeline import ReviewOutcome, run_review
from agent.reporter import render_report
from agent.runtime import Runtime
from agent.verifier import VerifiedFinding
from reviewers.analyzers.prompt_injection import RULE as INJECTION_RULE


@pytest.fixture(params=["scripted"])
def review_model(request: pytest.FixtureRequest) -> Iterator[tuple[Any, ScriptedReviewerModel | None]]:
    """(the model port a review uses, the scripted model behind it or None for a real one).

    A "base-model" parameter would yield `make_llm(base_url=None, model=None, api_key=None,
    model_path=Path(<what `reviewloop dev base-model` printed>), timeout_s=..., max_retries=0,
    max_output_tokens=256)` and None, skipped when the model is not built.
    """
    assert request.param == "scripted"
    script = ScriptedReviewerModel(reports=dict(REPORTS))
    with FakeOpenAIServer(responder=script) as server:
        llm = OpenAICompatibleLLM(
            base_url=server.base_url, model="fake-model", timeout_s=10, max_retries=0, max_output_tokens=512
        )
        try:
            yield llm, script
        finally:
            llm.close()


def review(llm: Any, *, injected: bool) -> ReviewOutcome:
    return run_review(Runtime(pool=None, llm=llm), demo_request(injected=injected), dsn=None)


def key(v: VerifiedFinding) -> tuple[str, int, str, str, str, str]:
    return (v.finding.path, v.finding.line, v.finding.rule, v.finding.title, v.verdict, v.reason)


def test_injected_instructions_change_nothing_but_add_their_own_finding(
    review_model: tuple[Any, ScriptedReviewerModel | None],
) -> None:
    llm, script = review_model
    clean = review(llm, injected=False)
    attacked = review(llm, injected=True)

    # Completed with the model at every stage: its plan, its reviewers' own findings, its judgments.
    for outcome in (clean, attacked):
        assert outcome.strategy_source == "model" and len(outcome.strategy.plan) == 4
        assert all(r.used_model and not any(s.tool == "model_error" for s in r.steps) for r in outcome.reviewer_results)
    if script is not None:
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
