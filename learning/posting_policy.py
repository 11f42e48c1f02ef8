"""A posting policy learned from real judged history, against today's hand-set rule (issue 41, item 3).

The environment: every finding reviewloop raised on real open-source history and a person judged
(`bench/history_judgements.json`: right, debatable or wrong), grouped by merge request (a commit).
For each finding a policy decides *post* (a thread) or *list* (a line in the summary). The reward of
a merge request: +1 for a right finding posted, −1 for a wrong one posted, 0 for a debatable one
posted, −`listed_right_cost` for a right one only listed (a person had to find it in the summary),
0 for anything else listed.

- `record_policy` is today's rule (`agent.verdicts.track_record`): a rule judged at least
  `MIN_JUDGED` times on at least `MIN_COMMITS` commits and right in fewer than `MIN_RIGHT_SHARE` of them
  is listed, everything else posts; ruff rules judged too seldom take their family's record.
- `learned_policy` estimates each finding's chances of being right and wrong from the training
  repositories — per rule, shrunk toward its family and the family toward all rules (a hierarchical
  Beta estimate; `prior_strength` pseudo-judgements at each level), separately for test files and
  other files when a rule has judgements in both — and posts exactly when posting's expected reward
  beats listing's: P(right) − P(wrong) > −cost·P(right).

What is not here: severity (the judgement keys do not carry it; today's rule always posts a critical
finding), and each merge request's s1 (the judged history keeps no diffs, so a language model cannot be
conditioned on it here). Both are said in the bench's output.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from agent.verdicts.track_record import MIN_COMMITS, MIN_JUDGED, MIN_RIGHT_SHARE

KEY = re.compile(r"^(?P<mr>[^:]+@[0-9a-f]+):(?P<path>.+):(?P<line>[0-9]+):(?P<rule>[^:]+:[^:]+)$")
TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$")
DEFAULT_LISTED_RIGHT_COST = 0.1
DEFAULT_PRIOR_STRENGTH = 4.0


@dataclass(frozen=True)
class Judged:
    mr: str  # owner/name@commit
    repo: str
    path: str
    rule: str
    verdict: str  # right | debatable | wrong

    @property
    def family(self) -> str:
        """`ruff:F401` → `ruff:F`; `tests:test-deleted` → `tests:`: the rule's kin."""
        tool, _, code = self.rule.partition(":")
        letters = re.match(r"[A-Z]+", code)
        return f"{tool}:{letters.group(0) if letters else ''}"

    @property
    def in_tests(self) -> bool:
        return TEST_PATH.search(self.path) is not None


def parse_judgements(raw: Mapping[str, Mapping[str, str]]) -> list[Judged]:
    """The judgement file's entries whose key parses (repo@commit:path:line:tool:code)."""
    out = []
    for key, value in raw.items():
        m = KEY.match(key)
        if m is None or value.get("verdict") not in ("right", "debatable", "wrong"):
            continue
        out.append(Judged(m["mr"], m["mr"].split("@")[0], m["path"], m["rule"], str(value["verdict"])))
    return out


Policy = Callable[[Judged], bool]  # True: post


def reward_of(finding: Judged, posted: bool, *, listed_right_cost: float = DEFAULT_LISTED_RIGHT_COST) -> float:
    if posted:
        return {"right": 1.0, "wrong": -1.0}.get(finding.verdict, 0.0)
    return -listed_right_cost if finding.verdict == "right" else 0.0


def _tally(items: Iterable[Judged], key: Callable[[Judged], str]) -> dict[str, list[int]]:
    """key → [right, debatable, wrong, commits]."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    commits: dict[str, set[str]] = defaultdict(set)
    for f in items:
        counts[key(f)][("right", "debatable", "wrong").index(f.verdict)] += 1
        commits[key(f)].add(f.mr)
    for k, c in counts.items():
        c[3] = len(commits[k])
    return dict(counts)


def record_policy(train: Sequence[Judged]) -> Policy:
    """Today's rule, its record taken from `train` only."""
    by_rule = _tally(train, lambda f: f.rule)
    by_family = _tally((f for f in train if f.rule.startswith("ruff:")), lambda f: f.family)

    def held(counts: list[int]) -> bool:
        right, debatable, wrong, commits = counts
        judged = right + debatable + wrong
        return judged >= MIN_JUDGED and commits >= MIN_COMMITS and right / judged < MIN_RIGHT_SHARE

    def post(f: Judged) -> bool:
        counts = by_rule.get(f.rule)
        if (counts is None or sum(counts[:3]) < MIN_JUDGED) and f.rule.startswith("ruff:"):
            counts = by_family.get(f.family, counts)
        return counts is None or not held(counts)

    return post


def learned_policy(
    train: Sequence[Judged],
    *,
    listed_right_cost: float = DEFAULT_LISTED_RIGHT_COST,
    prior_strength: float = DEFAULT_PRIOR_STRENGTH,
) -> Policy:
    """Post when expected reward says so, from shrunk estimates of P(right) and P(wrong) (module docstring)."""
    everything = _tally(train, lambda _: "all")["all"] if train else [0, 0, 0, 0]
    families = _tally(train, lambda f: f.family)
    rules = _tally(train, lambda f: f.rule)
    places = _tally(train, lambda f: f"{f.rule}|{f.in_tests}")

    def shrink(counts: list[int] | None, prior: tuple[float, float]) -> tuple[float, float]:
        if counts is None:
            return prior
        right, debatable, wrong, _ = counts
        n = right + debatable + wrong
        return (
            (right + prior_strength * prior[0]) / (n + prior_strength),
            (wrong + prior_strength * prior[1]) / (n + prior_strength),
        )

    n_all = max(1, sum(everything[:3]))
    base = (everything[0] / n_all, everything[2] / n_all)

    def post(f: Judged) -> bool:
        p_right, p_wrong = shrink(
            places.get(f"{f.rule}|{f.in_tests}"), shrink(rules.get(f.rule), shrink(families.get(f.family), base))
        )
        return p_right - p_wrong > -listed_right_cost * p_right

    return post


def split_by_repository(items: Sequence[Judged], *, held_out_share: float = 0.4) -> tuple[list[Judged], list[Judged]]:
    """A deterministic split by repository (a stable hash of its name), so no repository is in both."""
    import hashlib

    def held(repo: str) -> bool:
        return int(hashlib.sha256(repo.lower().encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < held_out_share

    return [f for f in items if not held(f.repo)], [f for f in items if held(f.repo)]


@dataclass(frozen=True)
class PolicyResult:
    per_mr: dict[str, float]  # merge request → reward
    posted: int
    right_posted: int
    wrong_posted: int
    right_listed: int

    @property
    def right_share(self) -> float | None:
        return self.right_posted / self.posted if self.posted else None


def evaluate(
    policy: Policy, items: Sequence[Judged], *, listed_right_cost: float = DEFAULT_LISTED_RIGHT_COST
) -> PolicyResult:
    per_mr: dict[str, float] = defaultdict(float)
    posted = right_posted = wrong_posted = right_listed = 0
    for f in items:
        decision = policy(f)
        per_mr[f.mr] += reward_of(f, decision, listed_right_cost=listed_right_cost)
        posted += decision
        right_posted += decision and f.verdict == "right"
        wrong_posted += decision and f.verdict == "wrong"
        right_listed += (not decision) and f.verdict == "right"
    return PolicyResult(dict(per_mr), posted, right_posted, wrong_posted, right_listed)
