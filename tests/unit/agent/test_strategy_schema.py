"""The per-merge-request strategy schema: a narrowing of `Strategy` to the change and the config."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from agent.diff import parse_unified_diff
from agent.strategy import (
    DEFAULT_STOP_CONDITION,
    MAX_PLAN,
    MAX_RISK_AREAS,
    RiskArea,
    Strategy,
    generate_strategy,
    mandatory_reviewers,
)
from agent.strategy_schema import MAX_FOCUS_PATHS, STEP_BUDGET_RANGE, strategy_json_schema, strategy_schema
from reviewers.kernel.contracts import PlanItem, RepoConfig

PATHS = ["auth/session.py", "docs/guide.md"]


def plan_item(reviewer: str, *focus: str) -> dict[str, Any]:
    return {"reviewer": reviewer, "focus_paths": list(focus), "checks": "x", "step_budget": 5}


def strategy(*plan: dict[str, Any], risks: tuple[str, ...] = ("auth/session.py",)) -> dict[str, Any]:
    return {
        "change_type": "feature",
        "risk_areas": [{"path": p, "why": "touches sessions"} for p in risks],
        "plan": list(plan),
        "stop_condition": "all planned reviewers finished",
    }


def admitted(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def test_the_limits_restate_pydantics() -> None:
    assert PlanItem.model_fields["focus_paths"].metadata[0].max_length == MAX_FOCUS_PATHS
    bounds = {type(m).__name__: m for m in PlanItem.model_fields["step_budget"].metadata}
    assert (bounds["Ge"].ge, bounds["Le"].le) == STEP_BUDGET_RANGE
    assert Strategy.model_fields["plan"].metadata[0].max_length == MAX_PLAN
    assert Strategy.model_fields["risk_areas"].metadata[0].max_length == MAX_RISK_AREAS
    assert set(RiskArea.model_fields) == {"path", "why"}


def test_admits_plans_over_the_changed_files_in_any_order_of_distinct_reviewers() -> None:
    schema = strategy_json_schema(PATHS)
    valid = [
        strategy(),
        strategy(plan_item("security", "auth/session.py"), plan_item("test_impact", "docs/guide.md")),
        strategy(plan_item("test_impact", "docs/guide.md"), plan_item("security", "auth/session.py", "docs/guide.md")),
        strategy(
            *(plan_item(r, "auth/session.py") for r in ("architecture", "code_quality", "security", "test_impact"))
        ),
    ]
    for value in valid:
        assert admitted(schema, value), value
        Strategy.model_validate(value)  # everything the schema admits is a Strategy
    assert len(schema["properties"]["plan"]["anyOf"]) == 1 + 4 + 12 + 24 + 24


def test_refuses_invented_paths_repeated_or_disabled_reviewers() -> None:
    schema = strategy_json_schema(PATHS, reviewers=["security", "test_impact"])
    refused = [
        strategy(plan_item("security", "src/invented.py")),
        strategy(risks=("../../etc/passwd",)),
        strategy(plan_item("security", "auth/session.py"), plan_item("security", "docs/guide.md")),
        strategy(plan_item("architecture", "auth/session.py")),  # disabled by the repository
        strategy(plan_item("security"), plan_item("test_impact", "auth/session.py"), plan_item("security")),
        strategy(plan_item("security")),  # a plan item names its focus when files changed
        {**strategy(), "change_type": "rewrite"},
        {**strategy(), "extra": 1},
        {**strategy(), "plan": [{**plan_item("security", "auth/session.py"), "step_budget": 31}]},
    ]
    for value in refused:
        assert not admitted(schema, value), value


def test_no_changed_files_admits_only_empty_path_lists() -> None:
    schema = strategy_json_schema([])
    assert admitted(schema, strategy(plan_item("security"), risks=()))
    assert not admitted(schema, strategy(plan_item("security", "a.py"), risks=()))
    with pytest.raises(ValueError, match="unknown reviewers: style"):
        strategy_json_schema(PATHS, reviewers=["security", "style"])  # type: ignore[list-item]


DIFF = """diff --git a/auth/session.py b/auth/session.py
--- a/auth/session.py
+++ b/auth/session.py
@@ -1,2 +1,3 @@
 import os
+TOKEN = os.environ["TOKEN"]
 x = 1
"""


class RecordingLLM:
    model_name = "recording"

    def __init__(self) -> None:
        self.json_schemas: list[Any] = []

    def complete_json(self, messages, schema, *, purpose, json_schema=None):  # type: ignore[no-untyped-def]
        self.json_schemas.append(json_schema)
        return Strategy.model_validate(strategy(plan_item("security", "auth/session.py"), risks=()))

    def complete_text(self, messages: Any, *, purpose: str, max_tokens: int = 512) -> str:
        return ""


def test_generate_strategy_asks_for_the_merge_requests_schema() -> None:
    files = parse_unified_diff(DIFF)
    llm = RecordingLLM()
    config = RepoConfig(reviewers=["security", "code_quality"])
    z, source, _ = generate_strategy(llm, s1="s1", files=files, config=config)
    assert source == "model" and z.plan[0].focus_paths == ["auth/session.py"]
    assert llm.json_schemas == [strategy_json_schema(["auth/session.py"], reviewers=["security", "code_quality"])]


def test_the_decisions_only_schema_admits_one_reviewer_and_no_free_text() -> None:
    schema = strategy_schema(PATHS, reviewers=["security", "test_impact"], decisions_only=True, max_focus_paths=1)
    item = {"reviewer": "security", "focus_paths": ["auth/session.py"], "checks": "", "step_budget": 3}
    one = {"change_type": "feature", "risk_areas": [], "plan": [item], "stop_condition": DEFAULT_STOP_CONDITION}
    assert admitted(schema, one) and admitted(schema, {**one, "change_type": "docs", "plan": []})
    assert Strategy.model_validate(one).model_dump(mode="json") == one  # a Strategy, in the full schema's order
    refused = [
        {**one, "plan": one["plan"] * 2},  # one reviewer
        {**one, "plan": [{**one["plan"][0], "reviewer": "test_impact"}, one["plan"][0]]},
        {**one, "plan": [{**one["plan"][0], "checks": "look closely"}]},  # no free text
        {**one, "risk_areas": [{"path": "auth/session.py", "why": "sessions"}]},
        {**one, "stop_condition": "when done"},
        {k: v for k, v in one.items() if k != "risk_areas"},
        {**one, "plan": [{**one["plan"][0], "focus_paths": PATHS}]},  # at most max_focus_paths
        {**one, "plan": [{**one["plan"][0], "focus_paths": ["not/changed.py"]}]},
        {**one, "plan": [{**one["plan"][0], "reviewer": "architecture"}]},  # not enabled
    ]
    for value in refused:
        assert not admitted(schema, value), value
    assert strategy_schema(PATHS) == strategy_json_schema(PATHS)  # the full schema by default
    with pytest.raises(ValueError, match="max_focus_paths"):
        strategy_schema(PATHS, decisions_only=True, max_focus_paths=0)


def test_a_required_reviewer_is_the_one_a_decisions_only_plan_may_name() -> None:
    """Security on a code change is put back into any plan by `constrain_strategy`, and the validity
    rule refuses a plan without it; the decisions-only schema admits only plans that name it."""
    enabled = ["security", "test_impact"]
    schema = strategy_schema(PATHS, reviewers=enabled, decisions_only=True, required_reviewers=["security"])
    item = {"reviewer": "security", "focus_paths": ["auth/session.py"], "checks": "", "step_budget": 3}
    one = {"change_type": "feature", "risk_areas": [], "plan": [item], "stop_condition": DEFAULT_STOP_CONDITION}
    assert admitted(schema, one)
    assert not admitted(schema, {**one, "plan": []})  # the empty plan leaves security out
    assert not admitted(schema, {**one, "plan": [{**item, "reviewer": "test_impact"}]})
    with pytest.raises(ValueError, match="one enabled reviewer"):
        strategy_schema(PATHS, reviewers=enabled, decisions_only=True, required_reviewers=["architecture"])
    with pytest.raises(ValueError, match="one enabled reviewer"):
        strategy_schema(PATHS, reviewers=enabled, decisions_only=True, required_reviewers=["security", "test_impact"])


def test_serving_asks_a_decisions_only_model_for_security_on_a_code_change_only() -> None:
    config = RepoConfig(reviewers=["security", "code_quality"])
    code = parse_unified_diff(DIFF)
    assert mandatory_reviewers(code, config) == ["security"]
    assert mandatory_reviewers(code, RepoConfig(reviewers=["code_quality"])) == []
    llm = RecordingLLM()
    generate_strategy(llm, s1="s1", files=code, config=config, decisions_only=True)
    [schema] = llm.json_schemas
    assert schema == strategy_schema(
        ["auth/session.py"], reviewers=config.reviewers, decisions_only=True, required_reviewers=["security"]
    )
    docs = parse_unified_diff(
        "diff --git a/docs/guide.md b/docs/guide.md\n--- a/docs/guide.md\n+++ b/docs/guide.md\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert mandatory_reviewers(docs, config) == []  # the rules run no security on a docs-only change


def test_after_the_required_reviewer_a_plan_may_add_one_other() -> None:
    enabled = ["security", "code_quality", "test_impact"]
    schema = strategy_schema(PATHS, reviewers=enabled, decisions_only=True, required_reviewers=["security"])
    sec = {"reviewer": "security", "focus_paths": ["auth/session.py"], "checks": "", "step_budget": 2}
    cq = {**sec, "reviewer": "code_quality"}
    base = {"change_type": "feature", "risk_areas": [], "stop_condition": DEFAULT_STOP_CONDITION}
    assert admitted(schema, {**base, "plan": [sec, cq]})
    assert not admitted(schema, {**base, "plan": [cq, sec]})  # the required one spends the budget first
    assert not admitted(schema, {**base, "plan": [sec, sec]})
    assert not admitted(schema, {**base, "plan": [sec, cq, {**sec, "reviewer": "test_impact"}]})
