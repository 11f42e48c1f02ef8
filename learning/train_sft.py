"""Supervised fine-tuning of the strategy model on strategy_sft (TRL's SFTTrainer, LoRA by default).

The model learns to write, for a rendered s1, the strategies that reviewers received well. The run
reports the held-out loss and the share of greedily generated strategies that validate against the
Strategy schema, both before and after training, and stores its step metrics in `training_runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from agent.store.db import Database
from learning.train_configs import SFTTrainingConfig
from learning.training import (
    HeldOut,
    TrainResult,
    TrlMethod,
    generate_completions,
    held_out_loss,
    run_trl_trainer,
    valid_strategy_share,
)

if TYPE_CHECKING:
    from transformers import TrainerCallback
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

COLUMNS = ("prompt", "completion")


def train_sft(
    *,
    base_model: Path,
    dataset_dir: Path,
    out_dir: Path,
    config: SFTTrainingConfig | None = None,
    db: Database | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> TrainResult:
    """Train on `dataset_dir`/strategy_sft and save the adapter (or full model) into `out_dir`."""
    config = config or SFTTrainingConfig()
    method = TrlMethod(
        kind="sft",
        dataset="strategy_sft",
        columns=COLUMNS,
        trl_classes=_trl_classes,
        measure=partial(_measure, config),
        options={"completion_only_loss": config.completion_only_loss},
    )
    return run_trl_trainer(
        method, config, base_model=base_model, dataset_dir=dataset_dir, out_dir=out_dir, db=db, callbacks=callbacks
    )


def _trl_classes() -> tuple[type[SFTConfig], type[SFTTrainer]]:
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    return SFTConfig, SFTTrainer


def _measure(config: SFTTrainingConfig, held_out: HeldOut, prefix: str) -> dict[str, float | None]:
    """Held-out loss, and the share of valid strategies among greedy answers to the first prompts."""
    evaluation = held_out.evaluation
    sample = [row["prompt"] for row in evaluation.select(range(min(len(evaluation), config.validity_sample)))]
    loss = held_out_loss(held_out)
    texts = generate_completions(
        held_out.trainer.model, held_out.tokenizer, sample, max_new_tokens=config.validity_max_new_tokens
    )
    return {
        f"{prefix}eval_loss": loss,
        f"{prefix}valid_strategy_share": valid_strategy_share(texts) if sample else None,
    }
