"""Review pipeline pieces the benchmarks share: one review of a synthetic MR, and reviewer concurrency.

(a) `review_once`: wall time of `run_review` with no model (bench/scaling.py and bench/memory.py
run it over 100 … 50,000 changed lines and fit the growth exponent).
(b) With an OpenAI-compatible server on loopback that answers valid structured output after a fixed
delay: the planned reviewers run concurrently, so four reviewers that each make one model call take
about one delay, not four.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agent.context import ReviewRequest
from agent.pipeline import run_review
from agent.runtime import Runtime
from bench.synthetic import synthetic_diff
from reviewers import run_reviewer
from reviewers.kernel.contracts import LLMPort, PlanItem, ReviewContext, ReviewerName, ReviewerResult

SIZES = ((100, 5), (1_000, 20), (10_000, 100), (50_000, 500))


def review_once(diff: str, files: dict[str, str]) -> float:
    request = ReviewRequest(source="replay", title="bench", diff_text=diff, files=files)
    start = time.perf_counter()
    run_review(Runtime(pool=None, llm=None), request, dsn=None, review_id=0)
    return time.perf_counter() - start


class OneCallReviewer:
    """Each reviewer makes exactly one model call (the server's delay), then runs its analyzers."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.model_wait_s: list[float] = []
        self.first_start: float | None = None
        self.last_end = 0.0
        self._lock = threading.Lock()

    def __call__(
        self, name: ReviewerName, context: ReviewContext, plan: PlanItem, llm: LLMPort | None, *, shared_prefix: str
    ) -> ReviewerResult:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            now = time.perf_counter()
            self.first_start = now if self.first_start is None else min(self.first_start, now)
        try:
            if llm is not None:
                llm.complete_text([{"role": "user", "content": shared_prefix}], purpose=f"bench.{name}", max_tokens=8)
            model_done = time.perf_counter()
            return run_reviewer(name, context, plan, None, shared_prefix=shared_prefix)
        finally:
            with self._lock:
                self.active -= 1
                self.model_wait_s.append(model_done - now)
                self.last_end = max(self.last_end, time.perf_counter())


SINGLE_EXECUTION = "[agreement]\nstrategies = 1\n"


def concurrency(delay_s: float = 0.5) -> dict[str, Any]:
    """Wall time of the reviewer stage with a model that takes `delay_s` per call, four reviewers."""
    from agent.llm.factory import make_llm
    from agent.strategy import Strategy
    from bench.fake_llm_server import DelayedLLMServer

    diff, files = synthetic_diff(changed_lines=400, files=4)
    plan = {
        "change_type": "feature",
        "plan": [
            {"reviewer": r, "focus_paths": [], "step_budget": 4}
            for r in ("security", "code_quality", "test_impact", "architecture")
        ],
    }
    with DelayedLLMServer(delay_s=delay_s, strategy=Strategy.model_validate(plan)) as server:
        llm = make_llm(
            base_url=server.base_url,
            model="bench",
            api_key=None,
            model_path=None,
            timeout_s=30,
            max_retries=0,
            max_output_tokens=64,
        )
        reviewer = OneCallReviewer()
        # One execution: this measures how the reviewers of one strategy overlap (bench.agreement measures N).
        files = {**files, ".reviewloop.toml": SINGLE_EXECUTION}
        request = ReviewRequest(source="replay", title="bench", diff_text=diff, files=files)
        start = time.perf_counter()
        outcome = run_review(Runtime(pool=None, llm=llm, reviewer_fn=reviewer), request, dsn=None, review_id=0)
        wall = time.perf_counter() - start
    calls = server.calls
    return {
        "delay_s": delay_s,
        "reviewers": len(outcome.reviewer_results),
        "model_calls": calls,
        "wall_s": wall,
        "wall_over_delay": wall / delay_s,
        "max_concurrent_reviewers": reviewer.max_active,
        # from the first reviewer's start to the last one's model answer: one delay if concurrent
        "reviewer_model_stage_s": max(reviewer.model_wait_s),
        "reviewer_stage_s": reviewer.last_end - (reviewer.first_start or 0.0),
        "reviewer_model_stage_over_delay": max(reviewer.model_wait_s) / delay_s,
    }
