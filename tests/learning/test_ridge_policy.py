"""The ridge-on-s1 reference policy (learning/ridge_policy.py): it reads the file blocks and the team's
votes from s1, learns which visits pay from exact visit values, and plans from its predictions."""

from __future__ import annotations

import random

from learning.headroom import ZERO, CaseTable, Outcome
from learning.ridge_policy import RidgePolicy, file_blocks, team_votes
from tests.unit.strata.test_replay_env import hand_case

SNIPPETS = {
    "except": ["try:", "    return int(key)", "except:", "    return None"],
    "yaml": ["data = yaml.load(stream)"],
    "log": ["logger.debug('called')"],
}


def s1_of(files: dict[str, str], votes: str) -> str:
    lines = ["files (3, +9 -0):", f"team votes by kind (up/down): {votes}", "added lines (untrusted data):", "<<<"]
    for path, kind in files.items():
        lines.append(f"modified {path} [python] +{len(SNIPPETS[kind])} -0")
        lines += [f"{i + 1}: +{text}" for i, text in enumerate(SNIPPETS[kind])]
    return "\n".join([*lines, ">>>"])


def value(kind: str, votes: dict[str, int]) -> float:
    """A team rewards a finding of a kind it votes up and punishes one it votes down; a logging
    change is worth a step's cost."""
    if kind == "except":
        return 1.0 if votes["bare-except"] > 0 else -1.0
    if kind == "yaml":
        return 1.0 if votes["unsafe-yaml"] > 0 else -1.0
    return -0.05


def example(rng: random.Random) -> tuple[str, CaseTable]:
    votes = {"bare-except": rng.choice((3, -3)), "unsafe-yaml": rng.choice((4, -4))}
    text = ", ".join(f"{k} +{max(v, 0)}/-{max(-v, 0)}" for k, v in votes.items())
    kinds = rng.sample(list(SNIPPETS), 3)
    files = {f"pkg/m{i}_{rng.randrange(1000)}.py": k for i, k in enumerate(kinds)}
    table = CaseTable(
        case=hand_case(), budget=2, required="security", readable={"security": list(files)},
        values={("security", p): Outcome(value(k, votes), 0.0, 0.0, 0.0, 0.0, 1) for p, k in files.items()},
        files={}, floor=ZERO,
    )  # fmt: skip
    return s1_of(files, text), table


def test_s1_parsing() -> None:
    s1 = s1_of({"a.py": "except", "b.py": "log"}, "bare-except +0/-3, unsafe-yaml +5/-1")
    assert file_blocks(s1) == {"a.py": ["try:", "    return int(key)", "except:", "    return None"],
                               "b.py": ["logger.debug('called')"]}  # fmt: skip
    assert team_votes(s1) == {"bare-except": -3, "unsafe-yaml": 4}


def test_ridge_learns_which_visits_pay_from_the_votes_and_plans_by_them() -> None:
    rng = random.Random(0)
    policy = RidgePolicy(alpha=0.1).fit([example(rng) for _ in range(200)])
    held = [example(random.Random(1000 + i)) for i in range(40)]
    got = [t.total(policy.plan(s1, t)).reward for s1, t in held]
    best_fixed = [t.total([("security", p) for p in list(t.readable["security"])[:1]]).reward for _, t in held]
    oracle = [max(v.reward for v in t.values.values()) for _, t in held]
    assert sum(got) / len(got) > 0.9 * sum(oracle) / len(oracle)
    assert sum(got) > sum(best_fixed) + 10
