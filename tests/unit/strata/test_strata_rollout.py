"""Hierarchical rollout with a scripted sampler in place of the model: parsing, FPS, rewards, advantages.

The sampler hands back token ids that index a list of texts, so every strategy is known in advance
and the rewards can be worked out by hand on the synthetic cases (one planted problem per case, in
the source file; one step allowed per reviewer).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from agent.embeddings import HashingEmbedder
from agent.strategy import Strategy
from learning.replay import ReplayEnv, ReplayEnvConfig
from learning.replay_reward import ReplayRewardConfig
from learning.strata.config import StrataConfig
from learning.strata.judge import rule_judge
from learning.strata.rollout import effective_m, parse_sample, rollout_groups
from learning.strata.synthetic import SyntheticConfig, generate_replay_set, problem_paths, uninformed_strategy
from learning.strata.warm_start import compact_strategy_json
from reviewers.kernel.contracts import PlanItem
from reviewers.kernel.errors import TrainingError

REWARDS = ReplayRewardConfig()
INVALID = -0.5


class ScriptedSampler:
    """Returns, for every prompt, the completions [[0], [1], ..., [k-1]] (ids into a text list)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def sample(
        self, prompts: Sequence[Sequence[int]], *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[list[int]]]:
        self.calls.append({"prompts": len(prompts), "n": n, "temperature": temperature, "seed": seed})
        return [[[i] for i in range(n)] for _ in prompts]


def focus(path: str) -> str:
    z = Strategy(change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=[path], step_budget=1)])
    return compact_strategy_json(z)


@pytest.fixture(scope="module")
def case() -> object:
    return generate_replay_set(SyntheticConfig(n_train=1, n_eval=1, seed=3))[0]


def test_parse_sample_keeps_the_reason_of_invalid_output(case: object) -> None:
    from learning.replay import ReplayCase

    assert isinstance(case, ReplayCase)
    files, config = ReplayEnv().files(case), case.repo_config()
    source = next(f.path for f in files if f.path in problem_paths(case))
    good = parse_sample([1, 2], focus(source), files, config)
    assert good.strategy is not None and good.strategy.plan[0].focus_paths == [source] and good.valid
    bad = parse_sample([3], '{"change_type": "novel"}', files, config)
    assert bad.strategy is None and bad.error is not None and "change_type" in bad.error and not bad.valid
    assert parse_sample([4], "no json here", files, config).error == "the answer holds no JSON object"
    # a plan serving's safety net would complete (no security on a code change) is parsed, not valid:
    # the gate counts it the same way (`agent.strategy.check_valid_strategy`)
    empty = parse_sample([5], '{"change_type": "docs"}', files, config)
    assert empty.strategy is not None and empty.strategy.change_type == "docs"
    assert not empty.valid and empty.error == "the plan leaves out security, which serving adds back"


def test_rewards_advantages_and_targets_by_hand(case: object) -> None:
    from learning.replay import ReplayCase

    assert isinstance(case, ReplayCase)
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    paths = [f.path for f in env.files(case)]
    (problem,) = problem_paths(case)
    decoy = next(p for p in paths if p != problem)
    texts = [focus(problem), focus(decoy), "not a strategy", '{"change_type": "feature", "plan": []}']
    config = StrataConfig(sigma=1, n_strategies=4, m_executions=3, embedder="hashing", keep_ratio=1.0)
    sampler = ScriptedSampler()
    (group,) = rollout_groups(
        [case],
        [[1, 2, 3]],
        sampler=sampler,
        decode=lambda ids: texts[ids[0]],
        env=env,
        embedder=HashingEmbedder(),
        judge=rule_judge,
        config=config,
        reward_config=REWARDS,
        seed=11,
        invalid_reward=INVALID,
    )
    assert sampler.calls == [{"prompts": 1, "n": 4, "temperature": 1.0, "seed": 11}]
    assert group.kept == [0, 1, 2, 3]  # σ = 1: nothing to choose
    severity = case.findings[0].severity
    hit = REWARDS.severity_weights[severity] - REWARDS.step_cost
    # a fixed executor runs each strategy once: M = 3 executions would be three copies of one
    assert effective_m(config, fixed_executor=True) == 1
    assert [s.rewards for s in group.strategies] == [[pytest.approx(hit)], [-0.05], [INVALID], [INVALID]]
    # the empty plan is one serving's safety net would complete: invalid, not executed, scored as such
    assert group.strategies[3].executions == [] and group.strategies[3].sample.strategy is not None
    assert group.strategies[3].sample.error == "the plan leaves out security, which serving adds back"
    scores = np.array([hit, -0.05, INVALID, INVALID])
    expected = (scores - scores.mean()) / (scores.std() + 1e-6)
    assert group.advantages == pytest.approx(expected.tolist())
    targets = group.token_targets()
    assert [len(t) for t in targets] == [1, 1, 1, 1]
    assert [float(t.advantages[0]) for t in targets] == pytest.approx(expected.tolist())
    assert all(float(t.mask[0]) == 1.0 for t in targets)


def test_farthest_point_sampling_drops_near_duplicates(case: object) -> None:
    from learning.replay import ReplayCase

    assert isinstance(case, ReplayCase)
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    paths = [f.path for f in env.files(case)]
    # 8 candidates: the first path four times, then the others: FPS over 4 keeps one of the repeats
    texts = [focus(paths[0])] * 4 + [focus(paths[1]), focus(paths[2]), focus(paths[1]), focus(paths[2])]
    config = StrataConfig(sigma=2, n_strategies=4, m_executions=1, embedder="hashing")
    (group,) = rollout_groups(
        [case],
        [[1]],
        sampler=ScriptedSampler(),
        decode=lambda ids: texts[ids[0]],
        env=env,
        embedder=HashingEmbedder(),
        judge=rule_judge,
        config=config,
        reward_config=REWARDS,
        seed=0,
    )
    assert len(group.candidates) == 8 and len(group.strategies) == 4
    # the three distinct plans first; the fourth is necessarily a repeat of one of them
    assert group.kept[0] == 0 and sorted(group.kept[1:3]) == [4, 5] and group.kept[3] in {1, 2, 3, 6, 7}
    kept_focus = [group.candidates[i].strategy.plan[0].focus_paths[0] for i in group.kept]  # type: ignore[union-attr]
    assert set(kept_focus[:3]) == set(paths)
    assert group.diversity > 0


def test_rollout_refuses_mismatched_inputs(case: object) -> None:
    with pytest.raises(TrainingError, match="1 cases but 2 prompts"):
        rollout_groups(
            [case],  # type: ignore[list-item]
            [[1], [2]],
            sampler=ScriptedSampler(),
            decode=lambda ids: "",
            env=ReplayEnv(),
            embedder=HashingEmbedder(),
            judge=rule_judge,
            config=StrataConfig(),
            reward_config=REWARDS,
            seed=0,
        )


def test_synthetic_set_is_seeded_split_and_detectable() -> None:
    config = SyntheticConfig(n_train=6, n_eval=4, seed=5)
    cases = generate_replay_set(config)
    assert [c.split for c in cases] == ["train"] * 6 + ["eval"] * 4
    assert [c.model_dump() for c in cases] == [c.model_dump() for c in generate_replay_set(config)]
    assert cases[0].model_dump() != generate_replay_set(SyntheticConfig(n_train=6, n_eval=4, seed=6))[0].model_dump()
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    # held-out cases share no path (so no name and no layout) with training ones
    train_paths = {p for c in cases if c.split == "train" for p in c.files}
    assert not train_paths & {p for c in cases if c.split == "eval" for p in c.files}
    for c in cases:
        (problem,) = problem_paths(c)
        assert problem.startswith("src/" if c.split == "train" else "app/")
        for path in [f.path for f in env.files(c)]:
            z = Strategy(change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=[path])])
            found = env.execute(c, z).findings
            # the planted line is found exactly when its file is reviewed (a critical one on every plan: the
            # floor no plan lowers, agent.plan_posting); the decoys are clean
            always = c.findings[0].severity == "critical"
            expected = [(problem, c.findings[0].line)] if path == problem or always else []
            assert [(f.path, f.line) for f in found] == expected
    uninformed = uninformed_strategy(cases[0], random.Random(0))
    assert sorted(uninformed.plan[0].focus_paths) == sorted(f.path for f in env.files(cases[0]))
