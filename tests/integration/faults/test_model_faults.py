"""The model server failing during a review: it times out, answers 500, answers text that is not the
asked-for JSON, or answers an enormous body. Each time the review still finishes, in bounded time,
with the rule-based strategy and the analyzers' findings, and the fallback is on record: the
review's `strategy_source`, each stage's note on its span, each model judgment's reason.

Every request of the review gets the fault (the scripted queue never runs dry), so what falls back
is what the fault caused. The review runs through `run_review` on real Postgres, checkpointed and
traced, with the real `openai` client talking to the scripted server over loopback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fakes.openai_server import FakeOpenAIServer, FakeReply
from psycopg.rows import dict_row

from agent.context import ReviewRequest
from agent.llm.factory import make_llm
from agent.pipeline import ReviewOutcome, run_review
from agent.runtime import Runtime
from agent.session import prepare_database
from agent.store.db import open_pool
from agent.tracing import setup_tracing, shutdown_tracing
from api.commands.review import build_demo_repository

pytest_plugins = ("fakes.openai_fixtures",)

TIMEOUT_S = 0.5  # the client's per-request timeout; the slow server answers after four of them
MAX_RETRIES = 1  # one retry per request, as for 5xx and timeouts in production (fewer, to keep it fast)
REPLIES = 400  # more than a review asks for: every request gets the fault
# a review asks the model for a strategy, one step per reviewer and one judgment per finding, in
# three rounds (reviewers and judgments run in parallel); a timed-out round costs two timeouts plus
# the client's backoff. The bound leaves room for a busy 2-core machine, not for a hang.
BOUNDED_S = 120.0  # ~5 s alone; a hang never ends, a loaded machine (issue 21) only slows it

FAULTS: dict[str, tuple[FakeReply, str]] = {
    "timeout": (FakeReply.text("{}", delay_s=TIMEOUT_S * 4), "LLMUnavailableError"),
    "http 500": (FakeReply.error(500), "LLMUnavailableError"),
    "invalid output": (FakeReply.text('{"verdict": "sure", "plan": "all of it"}'), "LLMOutputError"),
    "enormous output": (FakeReply.enormous(5_000_000), "LLMOutputError"),
}


@pytest.fixture(scope="module")
def demo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("faults") / "demo"
    build_demo_repository(repo)
    return repo


@pytest.fixture
def review_db(db_dsn: str) -> Iterator[str]:
    prepare_database(db_dsn)
    yield db_dsn


def run_demo_review(dsn: str, repo: Path, llm: Any) -> tuple[ReviewOutcome, float]:
    request = ReviewRequest(source="local", title="demo", repo_path=str(repo), base="demo-base", head="demo-head")
    with open_pool(dsn) as pool:
        provider = setup_tracing(pool=pool)
        try:
            started = time.monotonic()
            outcome = run_review(Runtime(pool=pool, llm=llm), request, dsn=dsn)
            elapsed = time.monotonic() - started
            provider.force_flush()
        finally:
            shutdown_tracing(provider)
    return outcome, elapsed


def rows(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def findings_of(outcome: ReviewOutcome) -> set[tuple[str, str, int, str, str]]:
    return {
        (v.finding.fingerprint, v.finding.path, v.finding.line, v.finding.category, v.verdict) for v in outcome.verified
    }


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failing_model_server_falls_back_and_the_review_finishes(
    fault: str, review_db: str, demo_repo: Path, openai_server: FakeOpenAIServer
) -> None:
    reply, error_type = FAULTS[fault]
    baseline, _ = run_demo_review(review_db, demo_repo, None)  # what the rules and analyzers find alone
    assert baseline.strategy_source == "rule" and any(v.verdict == "REAL" for v in baseline.verified)

    openai_server.enqueue(*[reply] * REPLIES)
    llm = make_llm(
        base_url=openai_server.base_url,
        model="fake-model",
        api_key=None,
        model_path=None,
        timeout_s=TIMEOUT_S,
        max_retries=MAX_RETRIES,
        max_output_tokens=256,
    )
    try:
        outcome, elapsed = run_demo_review(review_db, demo_repo, llm)
    finally:
        getattr(llm, "close", lambda: None)()

    assert openai_server.pending > 0, "the scripted faults ran out: some request got no fault"
    assert openai_server.chat_requests, "the model was never asked"
    assert elapsed < BOUNDED_S, f"the review took {elapsed:.1f} s with the model {fault}"

    # the same strategy and findings as without a model, verdicts included
    assert outcome.strategy_source == "fallback"
    assert outcome.strategy == baseline.strategy
    assert findings_of(outcome) == findings_of(baseline)

    [review] = rows(review_db, "SELECT status, strategy_source FROM reviews WHERE id = %s", outcome.review_id)
    assert review == {"status": "done", "strategy_source": "fallback"}
    for result in outcome.reviewer_results:
        assert not result.used_model
        assert (
            result.error is not None and error_type in result.error and "the analyzers' findings stand" in result.error
        )
    judged = rows(review_db, "SELECT verdict, verdict_reason FROM findings WHERE review_id = %s", outcome.review_id)
    real = [f for f in judged if f["verdict"] == "REAL"]
    assert real and all(f"model judgment unavailable ({error_type})" in f["verdict_reason"] for f in real)

    # each stage that fell back says why on its span, in the store
    (trace_id,) = rows(review_db, "SELECT trace_id FROM reviews WHERE id = %s", outcome.review_id)[0].values()
    spans = rows(review_db, "SELECT name, attributes FROM spans WHERE trace_id = %s", trace_id)
    fallbacks = {s["name"]: s["attributes"].get("reviewloop.fallback", "") for s in spans}
    assert fallbacks["strategy"].startswith("strategy model failed")
    for result in outcome.reviewer_results:
        assert error_type in fallbacks[f"reviewer {result.reviewer}"]
