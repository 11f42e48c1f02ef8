"""Train = serve (issue 41): a model's plan decides which findings a production review posts, and the
replay environment RL trains in says the same threads for the same plan on the same merge request.

Serving runs the whole graph (strategy from an OpenAI-compatible model on loopback, every analyzer on
every file, the verifier, `agent.plan_posting`); the replay environment executes the same plan with
its fixed executor. The plan visits one file with the security reviewer only: what the analyzers find
elsewhere is listed in serving (never dropped) and earns nothing in replay, except the floor (critical
findings), which both post.

The same holds with a trained model in service (issue 41, Done-when 3): the tiny model, fitted by a
short supervised pass to one plan on the replay environment's s1 for the demo merge request, is
registered and promoted like any trained version; production's review asks it with serving's s1 and
posts what the replay environment says the plan that model writes there posts. And the two render one
s1 for one merge request: the repository's review budget and the team's votes, keyed by kind of
finding as the learning environment keys them (`agent.finding_kinds`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fakes.demo_review import demo_request
from fakes.openai_server import FakeOpenAIServer, FakeReply

from agent.context import ReviewRequest
from agent.llm.factory import make_llm
from agent.llm.grammar import COMPACT_SEPARATORS
from agent.llm.openai_http import OpenAICompatibleLLM
from agent.pipeline import run_review
from agent.plan_posting import OUTSIDE_PLAN_REASON, floor_reason
from agent.runtime import Runtime
from agent.session import prepare_database
from agent.store import feedback as store_feedback
from agent.store.db import open_pool
from agent.strategy import STRATEGY_SYSTEM_PROMPT, Strategy, constrain_strategy, model_strategy
from agent.strategy_model import ServingOptions, StrategyModelSource
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


# --- one s1 --------------------------------------------------------------------------------------

BUDGET_CONFIG = "review_budget = 2\n"


def with_config(request: ReviewRequest, config_text: str, *, mr_iid: int) -> ReviewRequest:
    """The request with a `.reviewloop.toml` at head (not part of the change) and its own MR number."""
    files = {**(request.files or {}), ".reviewloop.toml": config_text}
    return request.model_copy(update={"files": files, "project": "shop/app", "mr_iid": mr_iid})


def demo_case(request: ReviewRequest, **team: Any) -> ReplayCase:
    """The merge request as the replay environment holds it (a served review's snapshot, or envgen's)."""
    files = dict(request.files or {})
    return ReplayCase(
        case_id="demo", title=request.title, description=request.description, diff=request.diff_text or "",
        files=files, config_text=files.get(".reviewloop.toml"), **team,
    )  # fmt: skip


@pytest.fixture
def served_db(db_dsn: str) -> str:
    """A database a stored review runs in: migrations and LangGraph's checkpoint tables."""
    prepare_database(db_dsn)
    return db_dsn


def finding_ids(dsn: str, review_id: int) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT fingerprint, id FROM findings WHERE review_id = %s", (review_id,)).fetchall()
    return {str(fp): int(i) for fp, i in rows}


def stored_s1(dsn: str, review_id: int) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT snapshot->>'s1' FROM reviews WHERE id = %s", (review_id,)).fetchone()
    assert row is not None and row[0]
    return str(row[0])


def test_serving_renders_the_s1_the_replay_environment_renders_budget_and_team_votes_by_kind(served_db: str) -> None:
    db_dsn = served_db
    request = demo_request(injected=False)
    with open_pool(db_dsn, min_size=1, max_size=2) as pool:
        first = run_review(Runtime(pool=pool, llm=None), with_config(request, BUDGET_CONFIG, mr_iid=1), dsn=db_dsn)
        found = {(v.finding.path, v.finding.rule): v.finding for v in first.verified}
        ids = finding_ids(db_dsn, first.review_id)
        # the team: two people want SQL injections pointed out, one is tired of bare-except remarks and
        # of untested-code notes (a rule of no defect kind, keyed by its id)
        for user in ("gitlab:1", "gitlab:2"):
            store_feedback.record_vote(
                pool,
                ids[found["inventory/api.py", "python:sql-interpolation"].fingerprint],
                user_key=user,
                source="emoji",
                value=1,
            )
        for rule in ("ruff:E722", "tests:untested-new"):
            store_feedback.record_vote(
                pool, ids[found["inventory/export.py", rule].fingerprint], user_key="gitlab:3", source="emoji", value=-1
            )
        second = run_review(Runtime(pool=pool, llm=None), with_config(request, BUDGET_CONFIG, mr_iid=2), dsn=db_dsn)
    served = stored_s1(db_dsn, second.review_id)  # what serving's strategy node rendered and kept

    case = demo_case(
        with_config(request, BUDGET_CONFIG, mr_iid=2),
        history={"inventory/api.py": 1.0, "inventory/export.py": 0.0},
        rule_votes={"sql-injection": (2, 0), "bare-except": (0, 1), "tests:untested-new": (0, 1)},
    )
    assert served == ReplayEnv(ReplayEnvConfig()).reset(case)
    assert "review budget: 2 reviewer steps in all, one file per step" in served
    assert "sql-injection +2/-0" in served and "python:sql-interpolation" not in served


# --- a trained model in service --------------------------------------------------------------------

# Security on the SQL file first, then code quality on the export module: within a review budget of one
# step only the first is visited, so the bare except the second would post is listed (the budget is
# what decides), and the secret in export.py posts as the floor.
TRAINED_PLAN = Strategy.model_validate(
    {
        "change_type": "feature",
        "risk_areas": [],
        "plan": [
            {"reviewer": "security", "focus_paths": ["inventory/api.py"], "checks": "", "step_budget": 1},
            {"reviewer": "code_quality", "focus_paths": ["inventory/export.py"], "checks": "", "step_budget": 1},
        ],
        "stop_condition": "done",
    }
)
ONE_STEP_CONFIG = "review_budget = 1\n"
SFT_STEPS = 150  # the loss on the one example is below 0.05 by ~80 steps on the CPU (seed 0): ~15 s


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Torch on one thread: on the shared 2-core machine two threads made the SFT steps ~14x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_a_production_review_with_a_trained_model_posts_what_replay_says_its_plan_posts(
    served_db: str, tmp_path: Path, one_thread: None
) -> None:
    db_dsn = served_db
    from learning.registry import promote_version, register_adapter
    from learning.strata.policy import PolicyConfig, StrategyPolicy
    from learning.strata.warm_start import WarmStartConfig, warm_start
    from learning.tiny_model import build_tiny_model

    request = with_config(demo_request(injected=False), ONE_STEP_CONFIG, mr_iid=1)
    case = demo_case(request)
    env = ReplayEnv(ReplayEnvConfig())
    s1 = env.reset(case)  # the prompt the environment trains on
    target = json.dumps(TRAINED_PLAN.model_dump(mode="json"), separators=COMPACT_SEPARATORS, ensure_ascii=False)

    base = build_tiny_model(tmp_path / "base", seed=0, corpus=[STRATEGY_SYSTEM_PROMPT, s1, target], vocab_size=512)
    policy = StrategyPolicy.load(base, config=PolicyConfig(use_lora=False, device="cpu"))
    losses = warm_start(policy, [(s1, target)], WarmStartConfig(steps=SFT_STEPS, batch_size=1))
    assert losses[-1] < 0.05 < losses[0]
    policy.save(tmp_path / "sft")

    # the plan that model writes in the replay environment, asked as the gate asks it
    llm = make_llm(
        base_url=None, model="sft-demo", api_key=None, model_path=tmp_path / "sft", timeout_s=60, max_retries=0,
        max_output_tokens=400, schema_in_prompt=False,
    )  # fmt: skip
    assert llm is not None
    files, config = env.files(case), case.repo_config()
    planned = constrain_strategy(model_strategy(llm, s1=s1, files=files, config=config), files, config)
    assert planned == TRAINED_PLAN  # the model learned its plan: what follows is that model's decision
    replayed = env.execute(case, planned)

    with open_pool(db_dsn, min_size=1, max_size=2) as pool:
        version = register_adapter(
            pool, name="sft-demo", base_model=str(tmp_path / "sft"), adapter_path=None, dataset_snapshot=None,
            metrics={"kind": "sft"},
        )  # fmt: skip
        promote_version(pool, version["id"])
        source = StrategyModelSource(pool, ServingOptions(max_output_tokens=400))
        # as in the scripted test: no track record or posting tier, which the replay verifier has not
        runtime = Runtime(pool=pool, llm=None, strategy_model=source, hold_by_track_record=False, posting="all")
        served = run_review(runtime, request, dsn=db_dsn)
    assert served.strategy_source == "model"
    assert stored_s1(db_dsn, served.review_id) == s1  # served the prompt it was trained on
    posted = [v.finding for v in served.verified if v.verdict == "REAL"]
    outside = [v.finding for v in served.verified if v.reason == OUTSIDE_PLAN_REASON]

    assert threads(posted) == threads(replayed.findings)
    # the plan decided: the visited file's injection posts, the floor (the committed token) posts, and
    # the bare except the second item would have posted lies beyond the one-step budget: listed
    assert ("inventory/api.py", "python:sql-interpolation") in {(f.path, f.rule) for f in posted}
    assert any(floor_reason(f) == "critical" for f in posted)
    assert "ruff:E722" in {f.rule for f in outside} and "ruff:E722" not in {f.rule for f in posted}
    assert {f.path for f in posted if floor_reason(f) is None} == {"inventory/api.py"}
