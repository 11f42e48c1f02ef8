"""A review by a real model through the real path: SmolLM2-135M-Instruct (the base model, untrained)
in process under constrained decoding writes the strategy, drives the reviewer loops and judges the
findings of a development-set merge request; the review completes with every answer valid under its
decoding schema, every analyzer finding of the review without a model, no finding outside the change
left standing, and the model's calls in the review's trace with their token counts.

One execution (`strategies = 1`) and a few model steps per reviewer keep it to a few minutes on a
shared 2-core machine. Not a review deadline: under load the strategy alone can take most of it, and
then the reviewers' steps (the analyzers' included) were cut and the test failed by timing alone
(issue 21). The bound is on steps, so what is asserted does not depend on the machine's speed; the
timings are printed, not asserted (they go in bench/).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest
from fakes.model_threads import MODEL_THREADS
from psycopg.rows import dict_row

from agent.context import ReviewRequest
from agent.diff import DiffIndex, parse_unified_diff
from agent.llm.backend import ChatRequest
from agent.pipeline import run_review
from agent.runtime import Runtime
from agent.store.db import open_pool
from agent.tracing import setup_tracing, shutdown_tracing
from agent.verifier import HUNK_SLACK
from reviewers import run_reviewer
from reviewers.kernel.contracts import ChatMessage, PlanItem, ReviewContext, ReviewerName, ReviewerResult

CASE_ID = "dev-bare-except"  # a change an analyzer has something to say about (a bare `except:`)
ONE_EXECUTION = "[agreement]\nstrategies = 1\n"
BASE_MODEL_STEPS = 2  # the model's own steps per reviewer; the strategy and the judgments are bounded by tokens
MAX_OUTPUT_TOKENS = 512  # a reviewer's report at its string bounds is ~250 tokens of compact JSON


@pytest.fixture
def base_model_llm(base_model_dir: Path) -> Iterator[Any]:
    """The in-process base model, recording every answer with the schema it was decoded under."""
    import torch

    from agent.llm.transformers_local import TransformersLLM

    class RecordingLLM(TransformersLLM):
        answers: list[tuple[str, dict[str, Any] | None, list[str]]]

        def _chat(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
            texts = super()._chat(messages, request)
            self.answers.append((request.purpose, request.json_schema, texts))
            return texts

    threads = torch.get_num_threads()
    # Threads: see fakes.model_threads (both cores when the suite runs alone).
    llm = RecordingLLM(base_model_dir, max_output_tokens=MAX_OUTPUT_TOKENS, cpu_threads=MODEL_THREADS)
    llm.answers = []
    try:
        yield llm
    finally:
        torch.set_num_threads(threads)


def devset_request(devset_path: Path) -> ReviewRequest:
    cases = [json.loads(line) for line in devset_path.read_text().splitlines() if line.strip()]
    case = next(c for c in cases if c["id"] == CASE_ID)
    return ReviewRequest(
        source="replay",
        title=case["title"],
        description=case["description"],
        diff_text=case["diff"],
        files={**case["files"], ".reviewloop.toml": ONE_EXECUTION},
    )


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


def rows(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.mark.slow
# pytest-timeout guards against a hang; ~4 minutes alone, but a loaded 2-core machine once spent 9 of
# the suite's 10 on the strategy alone (issue 21): the guard must not be what decides
@pytest.mark.timeout(2400)
def test_the_base_model_reviews_a_devset_merge_request_through_the_real_pipeline(
    base_model_llm: Any, devset_path: Path, db_dsn: str
) -> None:
    request = devset_request(devset_path)
    with open_pool(db_dsn) as pool:
        provider = setup_tracing(pool=pool)
        try:
            started = time.monotonic()
            # the case's bare except is what the model is asked to judge; its rule's held-out record would
            # list it for a person without a judgment (agent.verdicts.track_record), so the record is off
            runtime = Runtime(pool=pool, llm=base_model_llm, reviewer_fn=few_model_steps, hold_by_track_record=False)
            outcome = run_review(runtime, request, dsn=None)
            elapsed = time.monotonic() - started
            provider.force_flush()
        finally:
            shutdown_tracing(provider)

    # Completed, with the model at every stage.
    [review] = rows(db_dsn, "SELECT status, trace_id FROM reviews WHERE id = %s", outcome.review_id)
    assert review["status"] == "done"
    assert outcome.strategy_source == "model", outcome.strategy.render()
    purposes = [purpose for purpose, _, _ in base_model_llm.answers]
    assert purposes[0] == "strategy" and any(p.startswith("reviewer.") for p in purposes)

    # Every answer the model gave is valid JSON of the schema it was decoded under (no cut-off answer,
    # no retry needed: the reviewers' fallbacks say so otherwise).
    for purpose, schema, texts in base_model_llm.answers:
        assert schema is not None, purpose
        for text in texts:
            jsonschema.validate(json.loads(text), schema)
    for result in outcome.reviewer_results:
        assert not any(s.tool == "model_error" for s in result.steps), result.error
        assert "deadline" not in (result.error or ""), result.error  # no clock decided what was reviewed

    # Every analyzer finding of the review without a model is here.
    no_model = run_review(Runtime(pool=None, llm=None, hold_by_track_record=False), request, dsn=None)
    analyzers = {v.finding.fingerprint for v in no_model.verified if v.finding.rule != "llm"}
    assert analyzers and analyzers <= {v.finding.fingerprint for v in outcome.verified}

    # Nothing outside the change survives the verifier.
    index = DiffIndex(parse_unified_diff(request.diff_text or ""))
    standing = [v for v in outcome.verified if v.verdict in ("REAL", "NEEDS_HUMAN_REVIEW")]
    assert standing
    for v in standing:
        assert index.in_or_near_hunk(v.finding.path, v.finding.line, slack=HUNK_SLACK), (v.finding, v.reason)

    # The model's calls, the judgments among them, are in the review's trace with their token counts.
    spans = rows(db_dsn, "SELECT name, attributes FROM spans WHERE trace_id = %s", review["trace_id"])
    chats = [s["attributes"] for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert len(chats) == len(base_model_llm.answers)
    assert all(a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0 for a in chats)
    assert all("error.type" not in a for a in chats)
    judgments = [a for a in chats if a["reviewloop.purpose"] == "verify"]
    assert judgments and len(judgments) == purposes.count("verify")

    tokens = sum(a["gen_ai.usage.input_tokens"] + a["gen_ai.usage.output_tokens"] for a in chats)
    print(
        f"\nbase model review of {CASE_ID}: {elapsed:.1f} s, {len(chats)} model calls "
        f"({', '.join(f'{p}: {purposes.count(p)}' for p in dict.fromkeys(purposes))}), {tokens} tokens; "
        f"verdicts {[(v.finding.rule, v.finding.line, v.verdict) for v in outcome.verified]}"
    )
