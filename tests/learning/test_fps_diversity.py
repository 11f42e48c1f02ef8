"""With the real MiniLM embedder (offline), farthest-point sampling keeps strategies that are further
apart than random picks from the same candidates.

The candidates mimic what a policy samples at temperature: a few distinct plans, each drawn many times
with small variations (step budgets, focus order, wording). σ·N = 8·4 = 32 candidates, N = 4 kept.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from agent.diversity import farthest_point_sample, mean_pairwise_distance
from agent.embeddings import EmbedderConfig, StrategyEmbedder
from agent.strategy import RiskArea, Strategy
from learning.strata.config import StrataConfig
from reviewers.kernel.contracts import PlanItem

RANDOM_DRAWS = 500
VARIANTS_PER_PLAN = 8  # budgets x focus orders x wordings, below


def _security(budget: int, focus: list[str], wording: str) -> Strategy:
    return Strategy(
        change_type="feature",
        risk_areas=[RiskArea(path=focus[0], why=f"new login flow {wording}")],
        plan=[
            PlanItem(reviewer="security", focus_paths=focus, checks=f"injection, secrets {wording}", step_budget=budget)
        ],
    )


def _tests(budget: int, focus: list[str], wording: str) -> Strategy:
    return Strategy(
        change_type="tests",
        plan=[
            PlanItem(
                reviewer="test_impact", focus_paths=focus, checks=f"untested new code {wording}", step_budget=budget
            )
        ],
        stop_condition=f"coverage of changed behaviour checked {wording}",
    )


def _architecture(budget: int, focus: list[str], wording: str) -> Strategy:
    return Strategy(
        change_type="refactor",
        plan=[
            PlanItem(
                reviewer="architecture",
                focus_paths=focus,
                checks=f"layer rules, import cycles {wording}",
                step_budget=budget,
            ),
            PlanItem(reviewer="code_quality", focus_paths=focus, checks="dead code", step_budget=budget),
        ],
    )


def _docs(budget: int, focus: list[str], wording: str) -> Strategy:
    return Strategy(change_type="docs", plan=[], stop_condition=f"nothing to review: documentation only {wording}")


def candidate_strategies() -> list[Strategy]:
    focus = [["src/auth/login.py", "src/auth/session.py"], ["src/auth/session.py", "src/auth/login.py"]]
    wordings = ["", "(careful)"]
    budgets = [4, 8]
    out = []
    for build in (_security, _tests, _architecture, _docs):
        for budget, f, w in itertools.product(budgets, focus, wordings):
            out.append(build(budget, f, w))
    assert len(out) == 4 * VARIANTS_PER_PLAN
    return out


@pytest.fixture(scope="module")
def embedder() -> StrategyEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return StrategyEmbedder(EmbedderConfig(kind="minilm"))


def test_minilm_rows_are_unit_length_and_meaningful(embedder: StrategyEmbedder) -> None:
    rows = embedder.embed(
        ["check the login code for SQL injection", "look for SQL injection in authentication", "update the README"]
    )
    assert rows.shape == (3, 384)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert float(rows[0] @ rows[1]) > float(rows[0] @ rows[2])


def test_fps_keeps_more_diverse_strategies_than_random_picks(embedder: StrategyEmbedder) -> None:
    config = StrataConfig()
    candidates = candidate_strategies()
    assert len(candidates) == config.n_candidates
    rows = embedder.embed([s.render() for s in candidates])

    kept = farthest_point_sample(rows, config.n_strategies)
    fps_spread = mean_pairwise_distance(rows, kept)

    rng = np.random.default_rng(config.seed)
    random_spreads = [
        mean_pairwise_distance(rows, rng.choice(len(candidates), size=config.n_strategies, replace=False).tolist())
        for _ in range(RANDOM_DRAWS)
    ]
    random_mean = float(np.mean(random_spreads))
    print(f"FPS spread {fps_spread:.4f} vs random {random_mean:.4f} over {RANDOM_DRAWS} draws")
    assert fps_spread > random_mean
    # FPS maximises the smallest distance, so it lands one strategy in each distinct plan: a random
    # pick of 4 out of 4 plans x 8 variants does that only 8^4 / C(32, 4) = 11% of the time
    assert sorted(i // VARIANTS_PER_PLAN for i in kept) == [0, 1, 2, 3]
    # with σ = 1 there is nothing to choose: every candidate is kept
    assert farthest_point_sample(rows[:4], StrataConfig.no_fps().n_strategies) == [0, 1, 2, 3]
