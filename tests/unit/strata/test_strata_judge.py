"""Self-judgment on a hand-built list of steps, by rules and by a model behind the LLM port."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agent.strategy import Strategy
from learning.strata.judge import (
    JudgeConfig,
    ModelJudge,
    StepFlags,
    make_judge,
    rule_judge,
    tools_called_for,
)
from reviewers.kernel.contracts import ChatMessage, M, PlanItem, Step
from reviewers.kernel.errors import ConfigError, LLMOutputError, LLMUnavailableError, TrainingError

STRATEGY = Strategy(
    change_type="feature",
    plan=[PlanItem(reviewer="security", focus_paths=["src/auth.py"], checks="injection; run bandit", step_budget=8)],
)
SOURCE = "def login(user, password):\n    return check(user, password)"

# security's plan item: focus src/auth.py; checks cue "bandit" → run_analyzer is called for, and so are
# the always-on read_file/report/finish; search and list_tests are not.
STEPS = [
    Step(index=0, tool="read_file", args={"path": "src/auth.py"}, observation=SOURCE, paths=["src/auth.py"]),
    Step(
        index=1,
        tool="run_analyzer",
        args={"analyzer": "bandit", "paths": ["src/auth.py"]},
        observation="B602 subprocess call with shell=True at line 12",
        paths=["src/auth.py"],
    ),
    # (a) the same call as step 0
    Step(index=2, tool="read_file", args={"path": "src/auth.py"}, observation=SOURCE, paths=["src/auth.py"]),
    # (b) invalid
    Step(index=3, tool="search", args={"pattern": "eval("}, observation="bad regex", valid=False),
    # (c) outside the focus, and found nothing
    Step(
        index=4, tool="read_file", args={"path": "docs/a.md"}, observation="not found: docs/a.md", paths=["docs/a.md"]
    ),
    # outside the focus, but it learned something new: not flagged
    Step(index=5, tool="read_file", args={"path": "docs/b.md"}, observation="# B\nsetup notes", paths=["docs/b.md"]),
    # (c) a tool the checks do not call for, and found nothing
    Step(index=6, tool="list_tests", args={"path": "src/auth.py"}, observation="No tests found", paths=["src/auth.py"]),
    # (c) a tool the checks do not call for, and it only saw what step 0 saw
    Step(index=7, tool="search", args={"pattern": "def login"}, observation=SOURCE),
    Step(index=8, tool="report", args={"line": 12}, observation="reported", new_findings=1, paths=["src/auth.py"]),
    Step(index=9, tool="finish", args={}, observation=""),
]


def test_rule_judge_flags_repeats_invalid_and_idle_off_plan_steps() -> None:
    assert rule_judge(STRATEGY, STEPS, reviewer="security") == [2, 3, 4, 6, 7]


def test_a_reviewer_the_strategy_did_not_plan_follows_nothing() -> None:
    # every step is off plan; those that advanced (0, 1, 5, 8) are spared; finish with an empty
    # observation (9) is not
    assert rule_judge(STRATEGY, STEPS, reviewer="architecture") == [2, 3, 4, 6, 7, 9]


def test_focus_may_name_a_directory_or_a_glob() -> None:
    idle = Step(index=0, tool="read_file", args={"path": "src/auth/x.py"}, observation="", paths=["src/auth/x.py"])
    for focus in (["src/auth/"], ["src/auth"], ["src/*/x.py"]):
        strategy = Strategy(change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=focus)])
        assert rule_judge(strategy, [idle], reviewer="security") == []
    strategy = Strategy(change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=["lib/"])])
    assert rule_judge(strategy, [idle], reviewer="security") == [0]


def test_tools_called_for() -> None:
    everything = {"read_file", "search", "run_analyzer", "list_tests", "report", "finish"}
    assert tools_called_for("") == everything
    assert tools_called_for("injection, secrets") == everything  # names no tool: constrains none
    assert tools_called_for("untested code, coverage") == {"read_file", "report", "finish", "list_tests"}
    assert tools_called_for("Layer rules, import cycles") == {
        "read_file",
        "report",
        "finish",
        "run_analyzer",
        "search",
    }


def test_duplicate_step_indices_are_an_error() -> None:
    with pytest.raises(TrainingError, match="twice"):
        rule_judge(STRATEGY, [STEPS[0], STEPS[0]], reviewer="security")
    assert rule_judge(STRATEGY, [], reviewer="security") == []


class ScriptedLLM:
    """An in-memory LLM port that answers with a fixed StepFlags or raises a fixed error."""

    def __init__(self, answer: StepFlags | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[list[ChatMessage], str]] = []

    @property
    def model_name(self) -> str:
        return "scripted"

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: type[M], *, purpose: str, json_schema: Any = None
    ) -> M:
        self.calls.append((list(messages), purpose))
        if isinstance(self.answer, Exception):
            raise self.answer
        return schema.model_validate(self.answer.model_dump())

    def complete_text(self, messages: Sequence[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str:
        raise AssertionError("the judge asks for JSON only")


def test_model_judge_adds_the_rules_facts_to_the_models_flags() -> None:
    llm = ScriptedLLM(StepFlags(flagged=[5]))
    judge = ModelJudge(llm)
    # the model's judgment (5) plus the repeat (2) and the invalid call (3) that the rules establish
    assert judge(STRATEGY, STEPS, reviewer="security") == [2, 3, 5]
    assert judge.fallbacks == 0
    (messages, purpose) = llm.calls[0]
    assert purpose == "strata_judge"
    prompt = messages[1]["content"]
    assert STRATEGY.render() in prompt and "reviewer: security" in prompt
    assert '[3] search {"pattern": "eval("} valid=False' in prompt


@pytest.mark.parametrize(
    "answer", [LLMOutputError("bad json twice"), LLMUnavailableError("refused"), StepFlags(flagged=[1, 42])]
)
def test_model_judge_falls_back_to_the_rules(answer: Any) -> None:
    judge = ModelJudge(ScriptedLLM(answer))
    assert judge(STRATEGY, STEPS, reviewer="security") == rule_judge(STRATEGY, STEPS, reviewer="security")
    assert judge.fallbacks == 1


def test_make_judge() -> None:
    assert make_judge(JudgeConfig()) is rule_judge
    assert isinstance(make_judge(JudgeConfig(kind="model"), ScriptedLLM(StepFlags())), ModelJudge)
    with pytest.raises(ConfigError, match="needs an LLM"):
        make_judge(JudgeConfig(kind="model"))
    with pytest.raises(ConfigError):
        JudgeConfig(kappa=-0.1)
    assert JudgeConfig().kappa == 0.1
