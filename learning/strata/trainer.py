"""The StraTA trainer: hierarchical rollouts on the replay environment, then PPO-clip on the strategy tokens.

Each step: take the next `mrs_per_step` training merge requests, roll them out (rollout.py), keep the
groups with the largest reward spread (RAGEN's StarPO-S filter, advantages.py), score the kept
completions once without gradient (the "old" policy), then run `ppo_epochs` passes of the clipped
surrogate loss (loss.py: asymmetric clip, no KL, token-mean) over them. Every step logs reward mean
and std, strategy diversity, entropy, gradient norm, clip fraction and the judge-flag rate; with a
store the numbers also go to `training_runs.step_metrics`. Every `checkpoint_every` steps the adapter,
optimizer, RNG states and step are saved; `train(resume=True)` goes on from the latest checkpoint.

Why not TRL's GRPOTrainer (1.16): it computes advantages itself, from one scalar reward per
completion normalised within a fixed-size group (`_generate_and_score_completions`), with no hook to
hand it ours. StraTA needs σ·N sampled but N trained (farthest-point sampling), a top-δ score over M
executions, StarPO-S group filtering by reward spread, and (with a trained executor) a different
advantage on action tokens than on strategy tokens. Overriding its private scoring method would tie
us to one TRL release, so the loop is ours: small, and every rule it applies lives in a pure module.
Only the strategy tokens are trained (`fixed_executor`); the policy-as-executor mode is refused.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.embeddings import make_embedder
from agent.store.db import Database
from agent.store.models import finish_run, log_step, start_run
from learning.replay import ReplayCase, ReplayEnv, ReplayEnvConfig
from learning.replay_reward import ReplayRewardConfig
from learning.strata.advantages import filter_low_variance_groups, population_std
from learning.strata.checkpoint import latest_checkpoint, read_state, restore_checkpoint, save_checkpoint
from learning.strata.config import StrataConfig
from learning.strata.distributed import DataParallel
from learning.strata.judge import make_judge
from learning.strata.masking import stack_token_targets
from learning.strata.policy import PolicyConfig, PromptCache, StrategyPolicy, StrategySampler
from learning.strata.rollout import MRGroup, rollout_groups
from reviewers.kernel.errors import ConfigError, TrainingError

if TYPE_CHECKING:
    from learning.strata.vllm_backend import VLLMConfig, VLLMSampler
from learning.strata.run_config import RLTrainConfig
from learning.strata.schedule import batch_for_step, learning_rate_at, rollout_seed

log = logging.getLogger(__name__)

StepHook = Callable[[int, Mapping[str, Any]], None]


@dataclass
class TrainOutcome:
    """What `StrataTrainer.train` did."""

    steps: int  # the step counter at the end (continues across resumes)
    resumed_from: int | None
    run_id: int | None
    step_metrics: list[dict[str, Any]]


@dataclass(frozen=True)
class _RankRollouts:
    """One rank's rollouts of a step, as much as the step's metrics and the group filter need."""

    scores: list[list[float]]
    rewards: list[float]
    diversity: list[float]
    steps_run: int
    flagged: int
    valid: int
    candidates: int


class _RunLog:
    """Step metrics to the logger and, with a store, to the run's training_runs row."""

    def __init__(self, db: Database | None, run_id: int | None) -> None:
        self.db = db
        self.run_id = run_id

    def log(self, metrics: Mapping[str, Any]) -> None:
        log.info("strata step %s: %s", metrics.get("step"), {k: v for k, v in metrics.items() if k != "step"})
        if self.db is not None and self.run_id is not None:
            log_step(self.db, self.run_id, metrics)


RANK_SEED_STRIDE = 1_000_003  # rank r samples with seed + r·stride: ranks must not draw the same samples


class StrataTrainer:
    """StraTA RL on one policy (a base model with a LoRA adapter by default) over a replay set."""

    def __init__(
        self,
        config: StrataConfig,
        *,
        base_model: Path,
        train_cases: Sequence[ReplayCase],
        out_dir: Path,
        adapter: Path | None = None,
        train_config: RLTrainConfig | None = None,
        policy_config: PolicyConfig | None = None,
        env_config: ReplayEnvConfig | None = None,
        reward_config: ReplayRewardConfig | None = None,
        db: Database | None = None,
        sampler: StrategySampler | None = None,
        vllm_config: VLLMConfig | None = None,
        on_step_end: StepHook | None = None,
        data_parallel: DataParallel | None = None,
    ) -> None:
        if not config.fixed_executor:
            raise TrainingError(
                "training the policy as the reviewers' executor (fixed_executor=false) is not supported by this "
                "trainer yet: it needs action tokens from model-driven reviewer loops; use fixed_executor=true"
            )
        if not train_cases:
            raise TrainingError("no training cases in the replay set")
        self.config = config
        self.base_model = Path(base_model)
        self.adapter = Path(adapter) if adapter is not None else None
        self.train_cases = list(train_cases)
        self.out_dir = Path(out_dir)
        self.train_config = train_config or RLTrainConfig()
        self.policy_config = policy_config or PolicyConfig()
        self.env = ReplayEnv(env_config)
        self.reward_config = reward_config or ReplayRewardConfig()
        self.db = db
        self._external_sampler = sampler
        self.vllm_config = vllm_config
        self._vllm: VLLMSampler | None = None
        self.on_step_end = on_step_end
        self.embedder = make_embedder(config.embedder_config())
        self.judge = make_judge(config.judge_config())
        self.policy: StrategyPolicy | None = None
        self._prompts: dict[str, list[int]] = {}
        # A prompt cache shared by every policy this trainer loads (and by its caller's evaluations):
        # set it before train() when the adapter leaves prompts' keys and values alone.
        self.prompt_cache: PromptCache | None = None
        self._grammar: Any = None  # compiled lazily for constrained_decoding (agent/llm/grammar.py)
        # Under `accelerate launch` each process is one rank (learning/strata/distributed.py).
        self.dp = data_parallel or DataParallel.from_environment()
        if self.dp.world_size > self.train_config.mrs_per_step:
            raise ConfigError(
                f"mrs_per_step ({self.train_config.mrs_per_step}) must be at least the number of processes"
                f" ({self.dp.world_size}): every rank rolls out its share of each step's merge requests"
            )

    # --- set-up ---------------------------------------------------------------------------------

    def _set_threads(self) -> None:
        import torch

        if self.train_config.cpu_threads is not None:
            torch.set_num_threads(self.train_config.cpu_threads)

    def load_policy(self, checkpoint: Path | None = None) -> StrategyPolicy:
        """The policy at the start (base + adapter or a fresh LoRA) or as a checkpoint saved it."""
        if checkpoint is None:
            policy = StrategyPolicy.load(self.base_model, adapter=self.adapter, config=self.policy_config)
        elif (checkpoint / "adapter_config.json").is_file():
            policy = StrategyPolicy.load(self.base_model, adapter=checkpoint, config=self.policy_config)
        else:  # trained without LoRA: the checkpoint is the whole model
            policy = StrategyPolicy.load(checkpoint, config=self.policy_config)
        if self.prompt_cache is not None:
            policy.enable_prompt_cache(shared=self.prompt_cache)
        return policy

    def prompt_ids(self, case: ReplayCase) -> list[int]:
        if self.policy is None:
            raise TrainingError("the policy is not loaded")
        if case.case_id not in self._prompts:
            self._prompts[case.case_id] = self.policy.prompt_ids(self.env.reset(case))
        return self._prompts[case.case_id]

    def _optimizer(self, policy: StrategyPolicy) -> Any:
        import torch

        params = policy.trainable_parameters()
        if not params:
            raise TrainingError("the policy has no trainable parameters")
        return torch.optim.AdamW(params, lr=self.config.learning_rate, weight_decay=self.train_config.weight_decay)

    def _state(self, run_id: int | None, history: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "base_model": str(self.base_model),
            "initial_adapter": str(self.adapter) if self.adapter else None,
            "strata": asdict(self.config),
            "train": asdict(self.train_config),
            "step_metrics": history,
        }

    # --- one step -------------------------------------------------------------------------------

    def _sampler_for(self, cases: Sequence[ReplayCase]) -> StrategySampler:
        policy = self._require_policy()
        if self._external_sampler is not None:
            return self._external_sampler
        if self.train_config.constrained_decoding:
            from learning.strata.constrained import ConstrainedSampler, case_schema, make_grammar

            if self._grammar is None:
                self._grammar = make_grammar(policy)
            schemas = [case_schema(c, self.env, decisions_only=self.train_config.decisions_only) for c in cases]
            if self.train_config.jump_forward:
                from learning.strata.jump_forward import JumpForwardSampler

                return JumpForwardSampler(policy, self._grammar, schemas)
            return ConstrainedSampler(policy, self._grammar, schemas)
        return self._vllm or policy

    def rollout(self, cases: Sequence[ReplayCase], *, seed: int) -> list[MRGroup]:
        policy = self._require_policy()
        return rollout_groups(
            cases,
            [self.prompt_ids(c) for c in cases],
            sampler=self._sampler_for(cases),
            decode=policy.decode,
            env=self.env,
            embedder=self.embedder,
            judge=self.judge,
            config=self.config,
            reward_config=self.reward_config,
            seed=seed,
            invalid_reward=self.train_config.invalid_reward,
        )

    def _require_policy(self) -> StrategyPolicy:
        if self.policy is None:
            raise TrainingError("the policy is not loaded")
        return self.policy

    def train_step(self, step: int, optimizer: Any) -> dict[str, Any]:
        """Roll out, filter, and update once; returns the step's metrics."""
        import torch

        started = time.monotonic()
        policy = self._require_policy()
        everyone = batch_for_step(self.train_cases, step, size=self.train_config.mrs_per_step, seed=self.config.seed)
        cases = self.dp.shard(everyone)
        groups = self.rollout(cases, seed=rollout_seed(self.config.seed, step) + RANK_SEED_STRIDE * self.dp.rank)
        candidates = [c for g in groups for c in g.candidates]
        mine = _RankRollouts(
            scores=[g.scores for g in groups],
            rewards=[r for g in groups for r in g.rewards],
            diversity=[g.diversity for g in groups],
            steps_run=sum(e.n_steps for g in groups for s in g.strategies for e in s.executions),
            flagged=sum(f for g in groups for s in g.strategies for f in s.flagged),
            valid=sum(c.valid for c in candidates),
            candidates=len(candidates),
        )
        every = self.dp.gather(mine)
        # The filter ranks all the step's groups, in the order one process would hold them.
        all_scores = self.dp.unshard([e.scores for e in every])
        kept_all = filter_low_variance_groups(all_scores, self.config.keep_ratio)
        kept = [g // self.dp.world_size for g in kept_all if g % self.dp.world_size == self.dp.rank]
        rewards = [r for e in every for r in e.rewards]
        steps_run = sum(e.steps_run for e in every)
        candidates_total = sum(e.candidates for e in every)
        metrics: dict[str, Any] = {
            "step": step + 1,
            "reward_mean": float(np.mean(rewards)),
            "reward_std": population_std(rewards),
            "score_std_mean": float(np.mean([population_std(scores) for scores in all_scores])),
            "strategy_diversity": float(np.mean([d for e in every for d in e.diversity])),
            "valid_share": sum(e.valid for e in every) / candidates_total,
            "judge_flag_rate": sum(e.flagged for e in every) / steps_run if steps_run else 0.0,
            "groups_kept": len(kept_all),
            "groups": len(all_scores),
        }
        rows = [
            (groups[i].prompt_ids, s, t)
            for i in kept
            for s, t in zip(groups[i].strategies, groups[i].token_targets(), strict=True)
        ]
        row_counts = self.dp.gather(len(rows))
        if not sum(row_counts):
            # Every group had (near) zero reward spread: nothing to learn from this batch.
            metrics |= {"skipped": True, "seconds": round(time.monotonic() - started, 3)}
            return metrics
        prompts = [r[0] for r in rows]
        completions = [r[1].sample.completion_ids for r in rows]
        size = self.train_config.minibatch_size or max(row_counts)
        # Every rank takes part in every update (collectives must match), even with no rows of its own.
        updates_per_epoch = -(-max(row_counts) // size)
        if rows:
            _, advantages = stack_token_targets([r[2] for r in rows])
            old_logprobs, entropy, entropy_tokens = self._old_logprobs(policy, prompts, completions, size=size)
            token_adv = torch.as_tensor(advantages, dtype=torch.float32, device=old_logprobs.device)
            token_adv = token_adv[:, : old_logprobs.shape[1]]
        else:
            entropy, entropy_tokens = 0.0, 0.0
        entropy_parts = self.dp.gather((entropy * entropy_tokens, entropy_tokens))
        loss_cfg = self.config.loss_config()
        from learning.strata.loss import ppo_clip_loss

        params = policy.trainable_parameters()
        losses, norms, clips, kls = [], [], [], []
        order = list(range(len(rows)))
        shuffle = random.Random(rollout_seed(self.config.seed, step))
        lr = learning_rate_at(step, peak=self.config.learning_rate, warmup=self.train_config.warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        policy.model.train()
        for _ in range(self.train_config.ppo_epochs):
            shuffle.shuffle(order)
            for update in range(updates_per_epoch):
                idx = order[update * size : (update + 1) * size]
                optimizer.zero_grad(set_to_none=True)
                tokens, part = 0.0, (0.0, 0.0, 0.0)
                if idx:
                    now = policy.score(
                        [prompts[i] for i in idx], [completions[i] for i in idx], temperature=self.config.temperature
                    )
                    width = now.mask.shape[1]  # the minibatch's longest completion
                    loss, stats = ppo_clip_loss(
                        now.logprobs,
                        old_logprobs[idx, :width],
                        token_adv[idx, :width],
                        now.mask,
                        eps_low=loss_cfg.eps_low,
                        eps_high=loss_cfg.eps_high,
                    )
                    tokens = float(now.mask.sum())
                # Each rank's token-mean, weighted by its share of the update's tokens and summed over
                # ranks, is the token-mean over all of them: one process's loss on the same rollouts.
                total = self.dp.sum(tokens)
                if idx:
                    (loss * (tokens / total)).backward()  # type: ignore[no-untyped-call]
                    part = (float(loss.detach()), stats.clip_fraction, stats.approx_kl)
                self.dp.sum_gradients(params)
                norm = torch.nn.utils.clip_grad_norm_(params, self.train_config.max_grad_norm)
                optimizer.step()
                summed = self.dp.gather(tuple(v * tokens / total for v in part))
                losses.append(sum(p[0] for p in summed))
                clips.append(sum(p[1] for p in summed))
                kls.append(sum(p[2] for p in summed))
                norms.append(float(norm))
        policy.model.eval()
        entropy_weight = sum(w for _, w in entropy_parts)
        metrics |= {
            "loss": float(np.mean(losses)),
            "grad_norm": float(np.mean(norms)),
            "clip_fraction": float(np.mean(clips)),
            "approx_kl": float(np.mean(kls)),
            "entropy": sum(v for v, _ in entropy_parts) / entropy_weight if entropy_weight else 0.0,
            "trained_rollouts": sum(row_counts),
            "learning_rate": lr,
            "skipped": False,
            "seconds": round(time.monotonic() - started, 3),
        }
        return metrics

    def _old_logprobs(
        self, policy: StrategyPolicy, prompts: Sequence[list[int]], completions: Sequence[list[int]], *, size: int
    ) -> tuple[Any, float, float]:
        """Log-probabilities under the policy before this step's updates (B, C), their mean entropy, and the
        number of tokens that mean is over."""
        import torch

        policy.model.eval()  # no dropout: the old log-probabilities and the ratio's numerator match
        width = max(len(c) for c in completions)
        chunks, entropies, weights = [], [], []
        with torch.no_grad():
            for start in range(0, len(prompts), size):
                scored = policy.score(
                    prompts[start : start + size],
                    completions[start : start + size],
                    temperature=self.config.temperature,
                    with_entropy=True,
                )
                chunks.append(torch.nn.functional.pad(scored.logprobs, (0, width - scored.logprobs.shape[1])))
                entropies.append(float(scored.entropy) if scored.entropy is not None else 0.0)
                weights.append(float(scored.mask.sum()))
        return torch.cat(chunks), float(np.average(entropies, weights=weights)), float(sum(weights))

    # --- the run ---------------------------------------------------------------------------------

    def train(
        self, *, resume: bool = False, on_start: Callable[[StrategyPolicy, int], None] | None = None
    ) -> TrainOutcome:
        """Train for `config.max_steps` steps (counting the ones a resumed checkpoint already did).

        `on_start(policy, start_step)` runs once the policy is loaded, before the first step (the
        before-training measurement uses it, so the model is loaded once).
        """
        import torch

        self._set_threads()
        checkpoint = latest_checkpoint(self.out_dir) if resume else None
        if resume and checkpoint is None:
            log.info("no checkpoint in %s: starting from step 0", self.out_dir)
        if checkpoint is None:
            torch.manual_seed(self.config.seed)  # a resumed run restores the RNG states instead
        self.policy = self.load_policy(checkpoint)
        self.dp.broadcast_parameters(self.policy.trainable_parameters())
        self._prompts = {}
        optimizer = self._optimizer(self.policy)
        start, run_id, history, resumed_from = 0, None, [], None
        if checkpoint is not None:
            state = restore_checkpoint(checkpoint, optimizer=optimizer)
            start = resumed_from = int(state["step"])
            run_id = state.get("run_id")
            history = list(state.get("step_metrics") or [])
        main = self.dp.is_main  # rank 0 alone records, checkpoints and measures
        if self.db is not None and run_id is None and main:
            run_id = start_run(self.db, "rl", self._state(None, []) | {"out_dir": str(self.out_dir)})
        runlog = _RunLog(self.db if main else None, run_id)
        if on_start is not None and main:
            on_start(self.policy, start)
        self.dp.barrier()
        self._sync_sampler(start)
        step = start
        try:
            for step in range(start, self.config.max_steps):
                metrics = self.train_step(step, optimizer)
                self._sync_sampler(step + 1)
                history.append(metrics)
                runlog.log(metrics)
                done = step + 1
                if main and (done % self.train_config.checkpoint_every == 0 or done == self.config.max_steps):
                    save_checkpoint(
                        self.out_dir,
                        step=done,
                        policy=self.policy,
                        optimizer=optimizer,
                        state=self._state(run_id, history),
                        keep=self.train_config.keep_checkpoints,
                    )
                self.dp.barrier()  # no rank reads a checkpoint directory while rank 0 writes it
                if self.on_step_end is not None and main:
                    self.on_step_end(done, metrics)
        except BaseException as exc:
            if self.db is not None and run_id is not None and main:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                finish_run(self.db, run_id, status="failed", reason=f"stopped after step {step}: {reason}")
            raise
        return TrainOutcome(
            steps=max(start, self.config.max_steps), resumed_from=resumed_from, run_id=run_id, step_metrics=history
        )

    def _sync_sampler(self, step: int) -> None:
        """With vLLM generating, start it on first use and push the policy's weights after each update."""
        if self.train_config.generation_backend != "vllm" or self._external_sampler is not None:
            return
        policy = self._require_policy()
        if self._vllm is None:
            from learning.strata.vllm_backend import VLLMSampler

            self._vllm = VLLMSampler(
                self.base_model, eos_ids=policy.eos_ids, config=self.vllm_config, seed=self.config.seed
            )
        self._vllm.sync(policy, step, work_dir=self.out_dir / "vllm-sync")

    def save(self, out_dir: Path | None = None) -> Path:
        """The trained adapter (or model) and tokenizer into `out_dir` (default: the run's directory)."""
        target = Path(out_dir) if out_dir is not None else self.out_dir
        self._require_policy().save(target)
        return target


def trainer_state_of(out_dir: Path) -> dict[str, Any] | None:
    """The state of the latest checkpoint in `out_dir`, if any (for status displays)."""
    checkpoint = latest_checkpoint(out_dir)
    return read_state(checkpoint) if checkpoint is not None else None
