"""Two StraTA steps in one process of a data-parallel group (or alone), for test_strata_distributed.py.

    accelerate launch --num_processes 2 --cpu tests/learning/strata_dp_worker.py BASE REPLAY OUT
    python tests/learning/strata_dp_worker.py BASE REPLAY OUT

Rollouts come from a sampler that writes, for each prompt, strategies focusing its changed files in
an order fixed by the prompt alone: the same rollouts whichever rank draws the prompt, so the
parallel update can be compared with one process's on the same data. Each rank saves its trainable
parameters to OUT/params-rank{r}.pt.
"""

from __future__ import annotations

import random
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoTokenizer

from agent.strategy import Strategy
from learning.replay import ReplayEnvConfig, load_replay_cases
from learning.strata.config import StrataConfig
from learning.strata.policy import PolicyConfig
from learning.strata.run_config import RLTrainConfig
from learning.strata.trainer import StrataTrainer
from learning.strata.warm_start import compact_strategy_json
from reviewers.kernel.contracts import PlanItem


class PromptFixedSampler:
    """n strategies per prompt, each security on one changed file, chosen by a hash of the prompt."""

    def __init__(self, base: Path) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(str(base))
        self.eos = int(self.tokenizer.eos_token_id)

    def sample(
        self, prompts: Sequence[Sequence[int]], *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[list[int]]]:
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(list(ids))
            paths = sorted({w for w in text.split() if "/" in w and "." in w.rsplit("/", 1)[-1]})
            rng = random.Random(zlib.crc32(bytes(str(list(ids)), "utf-8")))
            picks = [rng.choice(paths) for _ in range(n)]
            out.append([self._encode(path) for path in picks])
        return out

    def _encode(self, path: str) -> list[int]:
        z = Strategy(change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=[path], step_budget=1)])
        ids: list[int] = self.tokenizer(compact_strategy_json(z), add_special_tokens=False)["input_ids"]
        return [*ids, self.eos]


def main(base: Path, replay: Path, out: Path) -> None:
    torch.set_num_threads(1)
    trainer = StrataTrainer(
        StrataConfig(
            sigma=2, n_strategies=2, m_executions=1, keep_ratio=1.0, temperature=1.0, max_new_tokens=64,
            embedder="hashing", learning_rate=1e-2, max_steps=2, seed=0,
        ),
        base_model=base,
        train_cases=load_replay_cases(replay, split="train"),
        out_dir=out / "run",
        train_config=RLTrainConfig(mrs_per_step=4, ppo_epochs=2, checkpoint_every=1, cpu_threads=1),
        policy_config=PolicyConfig(use_lora=False, device="cpu"),
        env_config=ReplayEnvConfig(step_budget_cap=1),
        sampler=PromptFixedSampler(base),
    )  # fmt: skip
    outcome = trainer.train()
    assert trainer.policy is not None
    params = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters() if p.requires_grad}
    torch.save(
        {"params": params, "metrics": outcome.step_metrics, "world_size": trainer.dp.world_size},
        out / f"params-rank{trainer.dp.rank}.pt",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
