"""The JSON schema a model's strategy is decoded under, built for one merge request.

`Strategy` (pydantic) says what a strategy is for every merge request; this schema says what it may
be for this one: focus and risk paths are enums of the changed files, reviewers an enum of the ones
the repository enables, and each reviewer planned at most once. A model decoded
under it (xgrammar in process, `response_format` on vLLM) cannot invent a path or repeat a reviewer,
so an untrained model already writes a usable plan and training has only the content to learn.
Every key is required and in `Strategy`'s order, so the answer has one shape to learn.

Everything the schema admits also validates as a `Strategy` (the schema is a narrowing, never a
widening); the answer is still validated by pydantic and still passes `constrain_strategy`, because
a server may ignore the schema.

`decisions_only=True` keeps only the decisions (change type, one reviewer, its focus paths in order)
and drops every free-text field (`checks`, `risk_areas`, `stop_condition`) and the step budget, which
take their defaults (the review budget caps the steps anyway): a small model then writes a plan in a
few dozen tokens, and the decisions are what training must learn. `max_focus_paths` caps the focus
list (at the review budget: a reviewer reads one file per step, so a longer list is never reached).

Reviewers cannot be kept distinct with `uniqueItems`: xgrammar (0.2.8, also vLLM's engine) accepts
`["a","a"]` under it. So the plan is spelled out as `anyOf` over every ordered selection of distinct
reviewers: 65 alternatives for the four reviewers, which compile in about 0.1 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations
from typing import Any, get_args

from agent.strategy import MAX_PLAN, MAX_RISK_AREAS, ChangeType
from reviewers.kernel.contracts import REVIEWERS, ReviewerName

MAX_FOCUS_PATHS = 20  # `PlanItem.focus_paths` max_length
STEP_BUDGET_RANGE = (1, 30)  # `PlanItem.step_budget` bounds


# Strings carry no `maxLength`: a grammar engine compiles a length bound into as many states (see
# `agent.llm.structured.decoding_schema`); pydantic checks the lengths and `max_tokens` bounds the answer.
_TEXT: dict[str, Any] = {"type": "string"}


def _focus_paths(paths: list[str], cap: int = MAX_FOCUS_PATHS) -> dict[str, Any]:
    """At least one changed file when there are any: the plan names its focus, in order (which files a
    reviewer reaches within its budget is what the strategy decides), rather than "everything"."""
    if not paths:
        return {"type": "array", "maxItems": 0}
    return {
        "type": "array",
        "items": {"$ref": "#/$defs/path"},
        "minItems": 1,
        "maxItems": max(1, min(MAX_FOCUS_PATHS, cap, len(paths))),
    }


def _plan_item(reviewer: ReviewerName, paths: list[str], *, decisions_only: bool = False, cap: int) -> dict[str, Any]:
    low, high = STEP_BUDGET_RANGE
    if decisions_only:
        return {
            "type": "object",
            "properties": {
                "reviewer": {"const": reviewer},
                "focus_paths": _focus_paths(paths, cap),
            },
            "required": ["reviewer", "focus_paths"],
            "additionalProperties": False,
        }
    return {
        "type": "object",
        "properties": {
            "reviewer": {"const": reviewer},
            "focus_paths": _focus_paths(paths, cap),
            "checks": _TEXT,
            "step_budget": {"type": "integer", "minimum": low, "maximum": high},
        },
        "required": ["reviewer", "focus_paths", "checks", "step_budget"],
        "additionalProperties": False,
    }


def _plan(reviewers: list[ReviewerName]) -> dict[str, Any]:
    """Every ordered selection of distinct reviewers, the empty plan included."""
    choices: list[dict[str, Any]] = []
    for size in range(min(MAX_PLAN, len(reviewers)) + 1):
        for order in permutations(reviewers, size):
            if not order:  # JSON Schema wants `prefixItems` non-empty: the empty plan is its own case
                choices.append({"type": "array", "maxItems": 0})
                continue
            choices.append(
                {
                    "type": "array",
                    "prefixItems": [{"$ref": f"#/$defs/plan_{r}"} for r in order],
                    "items": False,
                    "minItems": size,
                    "maxItems": size,
                }
            )
    return {"anyOf": choices}


def _one_reviewer_plan(reviewers: list[ReviewerName]) -> dict[str, Any]:
    """Exactly one reviewer (decisions only): which one is the decision."""
    return {"type": "array", "items": {"anyOf": [{"$ref": f"#/$defs/plan_{r}"} for r in reviewers]},
            "minItems": 1, "maxItems": 1}  # fmt: skip


def strategy_json_schema(
    changed_paths: Sequence[str],
    *,
    reviewers: Sequence[ReviewerName] = REVIEWERS,
    decisions_only: bool = False,
    max_focus_paths: int = MAX_FOCUS_PATHS,
) -> dict[str, Any]:
    """The schema of a strategy for a merge request that changes `changed_paths`.

    `reviewers` are the ones the repository enables (`RepoConfig.reviewers`); unknown names are
    refused with `ValueError`, since they would yield a plan `Strategy` cannot hold.
    """
    paths = list(dict.fromkeys(p for p in changed_paths if p))
    wanted = list(dict.fromkeys(reviewers))
    unknown = [r for r in wanted if r not in REVIEWERS]
    if unknown:
        raise ValueError(f"unknown reviewers: {', '.join(unknown)}")
    if max_focus_paths < 1:
        raise ValueError(f"max_focus_paths must be >= 1, got {max_focus_paths}")
    defs: dict[str, Any] = {
        f"plan_{r}": _plan_item(r, paths, decisions_only=decisions_only, cap=max_focus_paths) for r in wanted
    }
    if paths:
        defs["path"] = {"enum": paths}
    risk_area = {
        "type": "object",
        "properties": {"path": {"$ref": "#/$defs/path"}, "why": _TEXT},
        "required": ["path", "why"],
        "additionalProperties": False,
    }
    risk_areas: dict[str, Any] = (
        {"type": "array", "items": risk_area, "maxItems": min(MAX_RISK_AREAS, len(paths))}
        if paths
        else {"type": "array", "maxItems": 0}
    )
    if decisions_only:
        if not wanted:
            raise ValueError("decisions_only needs at least one reviewer to choose")
        return {
            "title": "Strategy",
            "type": "object",
            "properties": {"change_type": {"enum": list(get_args(ChangeType))}, "plan": _one_reviewer_plan(wanted)},
            "required": ["change_type", "plan"],
            "additionalProperties": False,
            "$defs": defs,
        }
    return {
        "title": "Strategy",
        "type": "object",
        "properties": {
            "change_type": {"enum": list(get_args(ChangeType))},
            "risk_areas": risk_areas,
            "plan": _plan(wanted),
            "stop_condition": _TEXT,
        },
        "required": ["change_type", "risk_areas", "plan", "stop_condition"],
        "additionalProperties": False,
        "$defs": defs,
    }
