"""Hierarchical rollout: per merge request, strategies from the policy, then executions of the kept ones.

For each case: sample σ·N strategy completions, parse each into a `Strategy`, embed the rendered
strategies and keep N by farthest-point sampling, execute each kept strategy in the replay
environment, judge the executions' steps, reward them, score each strategy by its top-δ rewards and
normalise the scores across the N strategies into advantages (learning/strata/advantages.py).

Two choices are ours and documented here:

- What is valid is `agent.strategy.check_valid_strategy`, the rule the evaluation gate counts with.
  An unparseable or invalid completion is not executed and gets `invalid_reward` (a penalty) for
  each of its executions. Executing the rule-based fallback in its place, as serving does, would
  credit the invalid text with the rules' reward and teach the policy that invalid output is fine.
- A strategy that leaves out a reviewer serving's safety net then adds (security on a code change,
  `constrain_strategy`) is scored like an invalid one: otherwise the policy learns to omit the plan
  and collect the rules' reward, the same shortcut as above by another door.
- With a fixed executor (the analyzers without a model, `llm=None`) an execution is deterministic:
  M executions of one strategy would be M copies of one. One is run and its reward stands for all
  (`effective_m == 1`), so top-δ scoring is the reward itself. There are no action tokens then, so
  the self-judgment penalty −κ per flagged step lowers the execution's reward instead: the strategy
  is what chose those steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from agent.diversity import farthest_point_sample, mean_pairwise_distance
from agent.embeddings import Embedder
from agent.strategy import Strategy, check_valid_strategy
from learning.replay import Execution, ReplayCase, ReplayEnv
from learning.replay_reward import ReplayRewardConfig, reward
from learning.strata.advantages import strategy_advantages, top_delta_score
from learning.strata.config import StrataConfig
from learning.strata.judge import StepJudge
from learning.strata.masking import TokenTargets, build_token_targets
from learning.strata.policy import StrategySampler
from reviewers.kernel.contracts import FileChange, LLMPort, RepoConfig
from reviewers.kernel.errors import TrainingError

log = logging.getLogger(__name__)

DEFAULT_INVALID_REWARD = -1.0
DecodeFn = Callable[[Sequence[int]], str]  # token ids → text (the policy's `decode`)


@dataclass(frozen=True)
class StrategySample:
    """One sampled completion, what it parsed into (None when it did not parse), and why it is not a
    valid strategy for its merge request (None: valid)."""

    completion_ids: list[int]
    text: str
    strategy: Strategy | None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def embedding_text(self) -> str:
        return self.strategy.render() if self.strategy is not None else self.text or "(empty)"


@dataclass
class StrategyRollout:
    """A kept strategy, its executions and their rewards."""

    sample: StrategySample
    executions: list[Execution]
    rewards: list[float]
    flagged: list[int]  # flagged steps per execution
    score: float = 0.0
    advantage: float = 0.0


@dataclass
class MRGroup:
    """Everything one merge request contributed to a training step."""

    case: ReplayCase
    prompt_ids: list[int]
    candidates: list[StrategySample]
    kept: list[int]
    strategies: list[StrategyRollout]
    diversity: float
    advantages: list[float] = field(default_factory=list)

    @property
    def scores(self) -> list[float]:
        return [s.score for s in self.strategies]

    @property
    def rewards(self) -> list[float]:
        return [r for s in self.strategies for r in s.rewards]

    def token_targets(self) -> list[TokenTargets]:
        """Per kept strategy: its completion tokens carry its strategy advantage (counted once)."""
        return [
            build_token_targets(
                [("strategy", len(s.sample.completion_ids), None)],
                execution_index=0,
                strategy_advantage=s.advantage,
                execution_advantage=0.0,
            )
            for s in self.strategies
        ]


def parse_sample(
    completion_ids: list[int], text: str, files: Sequence[FileChange], config: RepoConfig
) -> StrategySample:
    check = check_valid_strategy(text, files, config)
    return StrategySample(completion_ids, text, check.strategy, check.reason)


def effective_m(config: StrataConfig, *, fixed_executor: bool) -> int:
    """Executions actually run per strategy (see the module docstring)."""
    return 1 if fixed_executor else config.m_executions


def execute_strategy(
    case: ReplayCase,
    sample: StrategySample,
    *,
    env: ReplayEnv,
    judge: StepJudge,
    config: StrataConfig,
    reward_config: ReplayRewardConfig,
    invalid_reward: float,
    executor_llm: LLMPort | None = None,
) -> StrategyRollout:
    """Run a kept strategy M times (once with a fixed executor), judge, reward, and score it."""
    m = effective_m(config, fixed_executor=executor_llm is None)
    if sample.strategy is None or not sample.valid:
        rollout = StrategyRollout(sample, [], [invalid_reward] * m, [0] * m)
    else:
        executions, rewards, flagged = [], [], []
        for _ in range(m):
            execution = env.execute(case, sample.strategy, llm=executor_llm)
            n_flagged = sum(
                len(judge(execution.strategy, r.steps, reviewer=r.reviewer)) for r in execution.results if r.steps
            )
            executions.append(execution)
            flagged.append(n_flagged)
            if execution.added_by_safety_net:
                rewards.append(invalid_reward)
            else:
                rewards.append(reward(execution, case, reward_config) - config.kappa * n_flagged)
        rollout = StrategyRollout(sample, executions, rewards, flagged)
    rollout.score = top_delta_score(rollout.rewards, config.delta)
    return rollout


def _first_valid(samples: Sequence[StrategySample]) -> int:
    return next((i for i, s in enumerate(samples) if s.valid), 0)


def rollout_groups(
    cases: Sequence[ReplayCase],
    prompts: Sequence[list[int]],
    *,
    sampler: StrategySampler,
    decode: DecodeFn,
    env: ReplayEnv,
    embedder: Embedder,
    judge: StepJudge,
    config: StrataConfig,
    reward_config: ReplayRewardConfig,
    seed: int,
    invalid_reward: float = DEFAULT_INVALID_REWARD,
    executor_llm: LLMPort | None = None,
) -> list[MRGroup]:
    """One group per case: σ·N samples (one batched generation for all cases), FPS to N, executions, advantages."""
    if len(cases) != len(prompts) or not cases:
        raise TrainingError(f"{len(cases)} cases but {len(prompts)} prompts")
    sampled = sampler.sample(
        prompts,
        n=config.n_candidates,
        temperature=config.temperature,
        max_new_tokens=config.max_new_tokens,
        seed=seed,
    )
    groups = []
    for case, prompt, completions in zip(cases, prompts, sampled, strict=True):
        files, repo_config = env.files(case), case.repo_config()
        candidates = [parse_sample(ids, decode(ids), files, repo_config) for ids in completions]
        embeddings = np.asarray(embedder.embed([c.embedding_text for c in candidates]), dtype=np.float64)
        kept = farthest_point_sample(embeddings, config.n_strategies, first=_first_valid(candidates))
        strategies = [
            execute_strategy(
                case,
                candidates[i],
                env=env,
                judge=judge,
                config=config,
                reward_config=reward_config,
                invalid_reward=invalid_reward,
                executor_llm=executor_llm,
            )
            for i in kept
        ]
        advantages = strategy_advantages([s.score for s in strategies])
        for s, a in zip(strategies, advantages, strict=True):
            s.advantage = a
        groups.append(
            MRGroup(
                case=case,
                prompt_ids=list(prompt),
                candidates=candidates,
                kept=kept,
                strategies=strategies,
                diversity=mean_pairwise_distance(embeddings, kept),
                advantages=advantages,
            )
        )
    return groups
