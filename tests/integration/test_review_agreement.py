"""Agreement through the real pipeline: with a model, a review runs its reviewers under three diverse
strategies; a model finding every execution reports is REAL, one only a single execution reports goes
to a human with its count; analyzer findings are the same as in a single execution; `strategies = 1`
in `.reviewloop.toml` is the single review of before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.demo_review import DEMO, REPORTS, demo_request
from fakes.openai_server import FakeOpenAIServer
from fakes.scripted_reviewer_model import ScriptedReviewerModel

from agent.context import ReviewRequest
from agent.llm.openai_http import OpenAICompatibleLLM
from agent.pipeline import ReviewOutcome, run_review
from agent.runtime import Runtime
from reviewers.kernel.errors import TrainingError

LONELY = {"security": ("inventory/db.py", 16, '    """Items whose name contains `name`."""', "Docstring hides SQL")}


@pytest.fixture
def scripted() -> Iterator[tuple[OpenAICompatibleLLM, ScriptedReviewerModel]]:
    script = ScriptedReviewerModel(reports=dict(REPORTS), lonely=dict(LONELY), step_budget=9)
    with FakeOpenAIServer(responder=script) as server:
        llm = OpenAICompatibleLLM(
            base_url=server.base_url, model="fake-model", timeout_s=10, max_retries=0, max_output_tokens=512
        )
        try:
            yield llm, script
        finally:
            llm.close()


def with_config(request: ReviewRequest, toml: str) -> ReviewRequest:
    return request.model_copy(update={"files": {**(request.files or {}), ".reviewloop.toml": toml}})


def verdicts(outcome: ReviewOutcome, rule: str) -> dict[tuple[str, int], tuple[str, str]]:
    return {(v.finding.path, v.finding.line): (v.verdict, v.reason) for v in outcome.verified if v.finding.rule == rule}


def test_findings_need_the_support_of_k_executions(scripted: tuple[OpenAICompatibleLLM, ScriptedReviewerModel]) -> None:
    llm, _ = scripted
    outcome = run_review(Runtime(pool=None, llm=llm), demo_request(injected=False), dsn=None)
    assert len({i for i, _ in outcome.other_executions}) == 2  # N = 3 by default
    model = verdicts(outcome, "llm")
    assert model[("inventory/db.py", 16)] == (
        "NEEDS_HUMAN_REVIEW",
        "reported by 1 of 3 independent reviews (different strategies); 2 needed",
    )
    assert model[("inventory/db.py", 18)][0] == "REAL"  # every execution that planned security reported it

    single = run_review(
        Runtime(pool=None, llm=llm),
        with_config(demo_request(injected=False), "[agreement]\nstrategies = 1\n"),
        dsn=None,
    )
    assert single.other_executions == []
    assert all(v.finding.agreement is None for v in single.verified)
    # The analyzers' findings do not depend on how many executions ran.
    analyzers = {
        k
        for v in (outcome, single)
        for k in [frozenset((f.finding.fingerprint, f.verdict) for f in v.verified if f.finding.rule != "llm")]
    }
    assert len(analyzers) == 1
    assert DEMO["title"] == outcome.snapshot.title


def test_an_embedder_that_fails_leaves_one_execution(
    scripted: tuple[OpenAICompatibleLLM, ScriptedReviewerModel],
) -> None:
    class Broken:
        def embed(self, texts: object) -> object:
            raise TrainingError("the MiniLM package is not installed")

    llm, _ = scripted
    outcome = run_review(Runtime(pool=None, llm=llm, embedder=Broken()), demo_request(injected=False), dsn=None)  # type: ignore[arg-type]
    assert outcome.other_executions == [] and outcome.strategy_source == "model"
    assert all(v.finding.agreement is None for v in outcome.verified)
