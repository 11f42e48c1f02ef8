"""Training targets from the exact visit values (issue 41, Build 2): many good plans per MR, not one.

`learning.headroom.case_table` gives each (reviewer, file) visit's exact value on a training MR, and a
plan's reward is the sum of its visits' values. The old SFT stage trained on one plan per MR (the
oracle), so which of its decisions mattered was invisible: a one-file plan worth −0.05 looked the same
whether the other files were worth −1 or +1. Here:

- `good_plans`: every plan of the oracle's family (the mandatory reviewer's k best files for each k,
  then no second reviewer or one whose positive visits fill the rest) whose value is within `delta` of
  the best, best first — several targets per MR where several plans are about as good, so SFT learns
  the decisions that matter and not an arbitrary tie-break;
- `contrast_plans`: for DPO, plans that differ from the best in one decision that matters (one visit
  added or dropped) with a value margin of at least `margin`, worst first.

Files in a plan are in descending visit value, as `oracle_visits` orders them: the model writes the
most valuable file first and stops when the next one would lose value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from learning.headroom import CaseTable, Visit, _mandatory_counts


@dataclass(frozen=True)
class ScoredPlan:
    visits: tuple[Visit, ...]
    value: float


def _ranked(table: CaseTable, reviewer: str) -> list[str]:
    return sorted(table.readable[reviewer], key=lambda p: -table.values[(reviewer, p)].reward)


def family(table: CaseTable) -> list[ScoredPlan]:
    """The oracle's search space, every member scored: one plan per (k, second reviewer)."""
    out: dict[tuple[Visit, ...], float] = {}
    others = [r for r in table.readable if r != table.required and table.readable[r]]
    for k in _mandatory_counts(table):
        first: list[Visit] = []
        if table.required is not None and k:
            first = [(table.required, p) for p in _ranked(table, table.required)[:k]]
        rest = table.budget - k
        seconds: list[list[Visit]] = [[]]
        for r in others if rest > 0 else []:
            positive = [p for p in _ranked(table, r) if table.values[(r, p)].reward > 0][:rest]
            if positive:
                seconds.append([(r, p) for p in positive])
        for second in seconds:
            visits = tuple(first + second)
            if visits:
                out[visits] = table.total(visits).reward
    return [ScoredPlan(v, s) for v, s in sorted(out.items(), key=lambda kv: (-kv[1], len(kv[0])))]


def good_plans(table: CaseTable, *, delta: float = 0.1, max_plans: int = 4) -> list[ScoredPlan]:
    """The family's plans within `delta` of its best, best first, at most `max_plans`."""
    plans = family(table)
    if not plans:
        return []
    best = plans[0].value
    return [p for p in plans if p.value >= best - delta - 1e-12][:max_plans]


def contrast_plans(table: CaseTable, best: ScoredPlan, *, margin: float = 0.3, max_plans: int = 2) -> list[ScoredPlan]:
    """Valid plans one decision away from `best` (one visit added or dropped, the mandatory reviewer
    kept), at least `margin` worse, the worst first."""
    chosen = list(best.visits)
    reviewers = list(dict.fromkeys(r for r, _ in chosen))
    variants: dict[tuple[Visit, ...], float] = {}
    for v in chosen:  # drop one visit (the mandatory reviewer keeps at least one file)
        rest = [x for x in chosen if x != v]
        if table.required is not None and not any(r == table.required for r, _ in rest):
            continue
        if rest:
            variants[tuple(rest)] = table.total(rest).reward
    if len(chosen) < table.budget:  # add one visit of a reviewer already in the plan, or a new second one
        if table.required is None or len(reviewers) == 2:
            candidates = reviewers
        else:
            candidates = list(table.readable)
        for r in candidates:
            for p in table.readable.get(r, []):
                if (r, p) in chosen:
                    continue
                added = chosen + [(r, p)]
                order = list(dict.fromkeys(x for x, _ in added))
                if len(order) > 2 or (table.required is not None and order[0] != table.required):
                    continue
                grouped = [x for reviewer in order for x in added if x[0] == reviewer]
                variants[tuple(grouped)] = table.total(grouped).reward
    worse = [ScoredPlan(v, s) for v, s in variants.items() if s <= best.value - margin]
    return sorted(worse, key=lambda p: p.value)[:max_plans]


def visits_of(plans: Sequence[ScoredPlan]) -> list[list[Visit]]:
    return [list(p.visits) for p in plans]
