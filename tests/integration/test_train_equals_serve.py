"""Train = serve (issue 41): a model's plan decides which findings a production review posts, and the
replay environment RL trains in says the same threads for the same plan on the same merge request.

Serving runs the whole graph (strategy from an OpenAI-compatible model on loopback, every analyzer on
every file, the verifier, `agent.plan_posting`); the replay environment executes the same plan with
its fixed executor. The plan visits one file with the security reviewer only: what the analyzers find
elsewhere is listed in serving (never dropped) and earns nothing in replay, except the floor (critical
findings), which both post.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fakes.demo_review import demo_request
from fakes.openai_server import FakeOpenAIServer, FakeReply

from agent.llm.openai_http import OpenAICompatibleLLM
from agent.pipeline import run_review
from agent.plan_posting import OUTSIDE_PLAN_REASON, floor_reason
from agent.runtime import Runtime
from agent.strategy import Strategy
from learning.replay import ReplayCase, ReplayEnv, ReplayEnvConfig

PLAN = {
    "change_type": "feature",
    "risk_areas": [],
    "plan": [{"reviewer": "security", "focus_paths": ["inventory/db.py"], "checks": "queries", "step_budget": 1}],
    "stop_condition": "done",
}


def planner(body: dict[str, Any]) -> FakeReply:
    """The strategy prompt gets PLAN; a reviewer's turn finishes at once (its analyzers still ran)."""
    messages = body.get("messages", [])
    system = str(messages[0].get("content", "")) if messages else ""
    if system.startswith("You plan code reviews"):
        return FakeReply.json(PLAN)
    if "tool call" in system or '"tool"' in system:
        return FakeReply.json({"tool": "finish"})
    return FakeReply.json({"verdict": "REAL", "reason": "the evidence shows it"})


@pytest.fixture
def model() -> Iterator[OpenAICompatibleLLM]:
    with FakeOpenAIServer(responder=planner) as server:
        llm = OpenAICompatibleLLM(
            base_url=server.base_url, model="fake-model", timeout_s=10, max_retries=0, max_output_tokens=512
        )
        try:
            yield llm
        finally:
            llm.close()


def threads(findings: list[Any]) -> set[tuple[str, int, str]]:
    return {(f.path, f.line, f.rule) for f in findings}


def test_a_production_review_posts_what_the_replay_environment_says_that_plan_posts(
    model: OpenAICompatibleLLM,
) -> None:
    request = demo_request(injected=False)
    # the replay verifier keeps no track record or posting tier (the team's votes are its ground truth),
    # so serving runs with both off here: what differs between the two is then the plan alone
    runtime = Runtime(pool=None, llm=model, hold_by_track_record=False, posting="all")
    served = run_review(runtime, request, dsn=None)
    assert served.strategy_source == "model"
    posted = [v.finding for v in served.verified if v.verdict == "REAL"]
    outside = [v.finding for v in served.verified if v.reason == OUTSIDE_PLAN_REASON]

    case = ReplayCase(
        case_id="demo", title=request.title, description=request.description, diff=request.diff_text or "",
        files=dict(request.files or {}),
    )  # fmt: skip
    replayed = ReplayEnv(ReplayEnvConfig()).execute(case, Strategy.model_validate(PLAN))

    assert threads(posted) == threads(replayed.findings)
    # the plan mattered: it posted something, and findings outside it were listed, not dropped
    assert posted and outside
    assert {f.path for f in posted if floor_reason(f) is None} <= {"inventory/db.py"}
    assert all(f.reviewer != "security" or f.path != "inventory/db.py" for f in outside)
    # and without the plan deciding (the rule-based strategy), every one of them would have been posted
    ruled = run_review(Runtime(pool=None, llm=None, hold_by_track_record=False, posting="all"), request, dsn=None)
    assert threads(outside) <= threads([v.finding for v in ruled.verified if v.verdict == "REAL"])
