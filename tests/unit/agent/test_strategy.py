import pytest
from pydantic import ValidationError

from agent.diff import parse_unified_diff
from agent.strategy import (
    Strategy,
    check_strategy,
    check_valid_strategy,
    constrain_strategy,
    generate_strategy,
    parse_valid_strategy,
    rule_based_strategy,
    with_analyzer_coverage,
)
from agent.strategy_prompt import render_s1
from reviewers.kernel.contracts import ChatMessage, PlanItem, RepoConfig
from reviewers.kernel.errors import LLMOutputError

DIFF = """diff --git a/auth/session.py b/auth/session.py
--- a/auth/session.py
+++ b/auth/session.py
@@ -1,2 +1,3 @@
 import time
+TTL = 99
 x = 1
diff --git a/docs/guide.md b/docs/guide.md
--- a/docs/guide.md
+++ b/docs/guide.md
@@ -1 +1,2 @@
 # Guide
+More words.
"""
DOCS_ONLY = """diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1 +1,2 @@
 # x
+more
"""


def test_rule_strategy_plans_reviewers_for_code_and_none_for_docs() -> None:
    z = rule_based_strategy(parse_unified_diff(DIFF))
    assert [p.reviewer for p in z.plan][0] == "security"
    assert z.plan[0].focus_paths == ["auth/session.py"]
    docs = rule_based_strategy(parse_unified_diff(DOCS_ONLY))
    assert docs.plan == [] and docs.change_type == "docs"


def test_rule_strategy_respects_enabled_reviewers() -> None:
    z = rule_based_strategy(parse_unified_diff(DIFF), RepoConfig(reviewers=["code_quality"]))
    assert [p.reviewer for p in z.plan] == ["code_quality"]


def test_strategy_schema_rejects_a_reviewer_planned_twice() -> None:
    with pytest.raises(ValidationError):
        Strategy(change_type="feature", plan=[PlanItem(reviewer="security"), PlanItem(reviewer="security")])


def test_render_is_compact_and_s1_names_every_file() -> None:
    files = parse_unified_diff(DIFF)
    z = rule_based_strategy(files)
    assert len(z.render().split()) < 200
    s1 = render_s1(title="T", description="D", files=files)
    assert "auth/session.py" in s1 and "docs/guide.md" in s1


class ScriptedLLM:
    model_name = "scripted"

    def __init__(self, answer: Strategy | None) -> None:
        self.answer = answer

    def complete_json(self, messages, schema, *, purpose, json_schema=None):  # type: ignore[no-untyped-def]
        if self.answer is None:
            raise LLMOutputError("invalid JSON twice")
        return self.answer

    def complete_text(self, messages: list[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str:
        return ""


def test_model_strategy_is_constrained_and_failure_falls_back_to_rules() -> None:
    files = parse_unified_diff(DIFF)
    model_z = Strategy(
        change_type="feature",
        plan=[PlanItem(reviewer="security", focus_paths=["auth/session.py", "../../etc/passwd"])],
    )
    z, source, note = generate_strategy(ScriptedLLM(model_z), s1="s1", files=files, config=RepoConfig())
    assert source == "model" and z.plan[0].focus_paths == ["auth/session.py"] and note is None
    z2, source2, note2 = generate_strategy(ScriptedLLM(None), s1="s1", files=files, config=RepoConfig())
    assert source2 == "fallback" and note2 and "invalid JSON" in note2
    assert z2 == rule_based_strategy(files, RepoConfig())
    assert constrain_strategy(model_z, files, RepoConfig(reviewers=["architecture"])).plan == []


def test_a_model_cannot_plan_security_away_from_a_code_change() -> None:
    files = parse_unified_diff(DIFF)
    steered = Strategy(change_type="docs", plan=[PlanItem(reviewer="code_quality", focus_paths=["auth/session.py"])])
    z = constrain_strategy(steered, files, RepoConfig())
    assert [p.reviewer for p in z.plan] == ["security", "code_quality"]
    nothing = constrain_strategy(Strategy(change_type="docs", plan=[]), files, RepoConfig())
    assert [p.reviewer for p in nothing.plan] == ["security"]
    docs_only = constrain_strategy(Strategy(change_type="docs"), parse_unified_diff(DOCS_ONLY), RepoConfig())
    assert docs_only.plan == []  # nothing for security to read


def test_one_validity_rule_for_the_gate_and_rl() -> None:
    """`check_valid_strategy`: the answer parses as serving parses it (fences and prose around the JSON
    are fine) and plans every reviewer serving's safety net would otherwise add."""
    code, docs, config = parse_unified_diff(DIFF), parse_unified_diff(DOCS_ONLY), RepoConfig()
    security = '{"change_type": "feature", "plan": [{"reviewer": "security", "focus_paths": ["auth/session.py"]}]}'
    assert check_valid_strategy(f"Here it is:\n```json\n{security}\n```", code, config).valid
    assert parse_valid_strategy(security).plan[0].reviewer == "security"
    quality = security.replace('"security"', '"code_quality"')
    check = check_valid_strategy(quality, code, config)
    assert check.strategy is not None and check.strategy.plan[0].reviewer == "code_quality"
    assert not check.valid and check.reason == "the plan leaves out security, which serving adds back"
    # nothing to add: security disabled, or no code changed
    assert check_valid_strategy(quality, code, RepoConfig(reviewers=["code_quality"])).valid
    assert check_valid_strategy('{"change_type": "docs", "plan": []}', docs, config).valid
    bad = check_valid_strategy('{"change_type": "novel"}', code, config)
    assert bad.strategy is None and bad.reason is not None and "change_type" in bad.reason
    assert check_strategy(None, code, config).reason == "the answer holds no strategy"


def test_a_models_plan_keeps_the_analyzer_coverage_of_the_rules() -> None:
    two = DIFF + DIFF.replace("auth/session.py", "auth/tokens.py")
    files = parse_unified_diff(two)
    rules = rule_based_strategy(files, RepoConfig())
    narrow = Strategy(
        change_type="feature",
        plan=[PlanItem(reviewer="security", focus_paths=["docs/guide.md"], step_budget=1)],
    )
    widened, left_out = with_analyzer_coverage(narrow, rules)
    [security] = widened.plan
    rule_security = next(p for p in rules.plan if p.reviewer == "security")
    # The model's focus first, then the files the rules would analyze, with the steps to reach them.
    assert security.focus_paths == ["docs/guide.md", *rule_security.focus_paths]
    assert security.step_budget == rule_security.step_budget + 1
    # The reviewers it left out run as the rules plan them (with their analyzers only, see the graph).
    assert [p.reviewer for p in left_out] == [p.reviewer for p in rules.plan if p.reviewer != "security"]
    assert with_analyzer_coverage(rules, rules) == (rules, [])
