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

`strategy_schema(..., decisions_only=True)` keeps only what decides a review run by the analyzers
alone (no model in the reviewers, the executor RL and the gate use for `analyzer-only` versions):
the change type and at most one reviewer (two where one is required, below) with its focus paths
and step budget. The free-text fields are pinned (no risk areas, empty checks, the default stop
condition): that executor never reads them, and a small model decoded under the full schema can
write a string that never closes before its token budget ends, losing a plan whose decisions were
fine. Pinned rather than left out, so the answer keeps the full schema's shape and order, the shape
the model was trained to write.
With `required_reviewers` (security on a code change, `agent.strategy.mandatory_reviewers`) the plan
names that reviewer first and may add one other, and the empty plan is gone: a plan without it is
one serving completes and the validity rule refuses, so the schema must not admit it; the second
reviewer keeps the choice of what else the shared review budget is spent on.

Reviewers cannot be kept distinct with `uniqueItems`: xgrammar (0.2.8, also vLLM's engine) accepts
`["a","a"]` under it. So the plan is spelled out as `anyOf` over every ordered selection of distinct
reviewers: 65 alternatives for the four reviewers, which compile in about 0.1 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations
from typing import Any, get_args

from agent.strategy import DEFAULT_STOP_CONDITION, MAX_PLAN, MAX_RISK_AREAS, ChangeType
from reviewers.kernel.contracts import REVIEWERS, ReviewerName

MAX_FOCUS_PATHS = 20  # `PlanItem.focus_paths` max_length
STEP_BUDGET_RANGE = (1, 30)  # `PlanItem.step_budget` bounds


# Free text is bounded far below `Strategy`'s own limits: a small model otherwise rambles inside a
# string until `max_tokens` cuts the plan off. The in-process backend holds strings to these bounds
# at no compile cost; a server is sent the schema without them (`agent.llm.structured.decoding_schema`).
MAX_WHY_CHARS = 80  # why a file is risky: a clause
MAX_CHECKS_CHARS = 100  # what a reviewer should check: a line
MAX_STOP_CHARS = 80  # when the review is done: a clause


def _text(max_chars: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_chars}


def _focus_paths(paths: list[str]) -> dict[str, Any]:
    """At least one changed file when there are any: the plan names its focus, in order (which files a
    reviewer reaches within its budget is what the strategy decides), rather than "everything"."""
    if not paths:
        return {"type": "array", "maxItems": 0}
    return {
        "type": "array",
        "items": {"$ref": "#/$defs/path"},
        "minItems": 1,
        "maxItems": min(MAX_FOCUS_PATHS, len(paths)),
    }


def _plan_item(reviewer: ReviewerName, paths: list[str]) -> dict[str, Any]:
    low, high = STEP_BUDGET_RANGE
    return {
        "type": "object",
        "properties": {
            "reviewer": {"const": reviewer},
            "focus_paths": _focus_paths(paths),
            "checks": _text(MAX_CHECKS_CHARS),
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


def strategy_json_schema(
    changed_paths: Sequence[str], *, reviewers: Sequence[ReviewerName] = REVIEWERS
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
    defs: dict[str, Any] = {f"plan_{r}": _plan_item(r, paths) for r in wanted}
    if paths:
        defs["path"] = {"enum": paths}
    risk_area = {
        "type": "object",
        "properties": {"path": {"$ref": "#/$defs/path"}, "why": _text(MAX_WHY_CHARS)},
        "required": ["path", "why"],
        "additionalProperties": False,
    }
    risk_areas: dict[str, Any] = (
        {"type": "array", "items": risk_area, "maxItems": min(MAX_RISK_AREAS, len(paths))}
        if paths
        else {"type": "array", "maxItems": 0}
    )
    return {
        "title": "Strategy",
        "type": "object",
        "properties": {
            "change_type": {"enum": list(get_args(ChangeType))},
            "risk_areas": risk_areas,
            "plan": _plan(wanted),
            "stop_condition": _text(MAX_STOP_CHARS),
        },
        "required": ["change_type", "risk_areas", "plan", "stop_condition"],
        "additionalProperties": False,
        "$defs": defs,
    }


def _decisions_plan_item(reviewer: ReviewerName, paths: list[str], max_focus_paths: int) -> dict[str, Any]:
    low, high = STEP_BUDGET_RANGE
    focus = _focus_paths(paths)
    if paths:
        focus["maxItems"] = max(1, min(focus["maxItems"], max_focus_paths))
    return {
        "type": "object",
        "properties": {
            "reviewer": {"const": reviewer},
            "focus_paths": focus,
            "checks": {"const": ""},
            "step_budget": {"type": "integer", "minimum": low, "maximum": high},
        },
        "required": ["reviewer", "focus_paths", "checks", "step_budget"],
        "additionalProperties": False,
    }


def strategy_schema(
    changed_paths: Sequence[str],
    *,
    reviewers: Sequence[ReviewerName] = REVIEWERS,
    decisions_only: bool = False,
    max_focus_paths: int = MAX_FOCUS_PATHS,
    required_reviewers: Sequence[ReviewerName] = (),
) -> dict[str, Any]:
    """The strategy schema for a merge request: the full one (`strategy_json_schema`), or with
    `decisions_only` the change type and at most one reviewer with at most `max_focus_paths` focus
    paths (the files its step budget can reach), no free text (see the module docstring).
    `required_reviewers` (at most one; decisions-only) is the reviewer every plan names first, and
    may follow with one other. The full schema leaves it to `constrain_strategy`, which adds a
    missing one back."""
    if not decisions_only:
        return strategy_json_schema(changed_paths, reviewers=reviewers)
    if max_focus_paths < 1:
        raise ValueError(f"max_focus_paths must be at least 1, got {max_focus_paths}")
    full = strategy_json_schema(changed_paths, reviewers=reviewers)  # validates the reviewers
    paths = list(dict.fromkeys(p for p in changed_paths if p))
    wanted = list(dict.fromkeys(reviewers))
    required = list(dict.fromkeys(required_reviewers))
    if len(required) > 1 or not set(required) <= set(wanted):
        raise ValueError(
            f"a decisions-only plan requires at most one enabled reviewer; required {required}, enabled {wanted}"
        )
    defs: dict[str, Any] = {f"plan_{r}": _decisions_plan_item(r, paths, max_focus_paths) for r in wanted}
    if "path" in full["$defs"]:
        defs["path"] = full["$defs"]["path"]

    def plan_of(*names: str) -> dict[str, Any]:
        items = [{"$ref": f"#/$defs/plan_{r}"} for r in names]
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items), "maxItems": len(items)}

    if required:  # the required reviewer first (it spends the shared budget first), then at most one more
        one = [plan_of(required[0])] + [plan_of(required[0], r) for r in wanted if r != required[0]]
    else:  # the empty plan (a docs-only change) or one reviewer
        one = [{"type": "array", "maxItems": 0}] + [plan_of(r) for r in wanted]
    return {
        "title": "Strategy",
        "type": "object",
        "properties": {
            "change_type": full["properties"]["change_type"],
            "risk_areas": {"type": "array", "maxItems": 0},
            "plan": {"anyOf": one},
            "stop_condition": {"const": DEFAULT_STOP_CONDITION},
        },
        "required": ["change_type", "risk_areas", "plan", "stop_condition"],
        "additionalProperties": False,
        "$defs": defs,
    }
