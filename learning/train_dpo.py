"""Direct preference optimisation of the strategy model on strategy_dpo (TRL's DPOTrainer).

Pairs are two strategies for the same merge request state whose rewards differed; the model learns
to put more probability on the better one. With LoRA the reference model is the base model itself
(the adapter switched off), so no second copy is held in memory. The run reports the mean
log-probability margin log p(chosen) − log p(rejected) on held-out pairs, before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.store.db import Database
from learning.train_configs import DPOTrainingConfig
from learning.training import HeldOut, TrainResult, TrlMethod, preference_margin, run_trl_trainer

if TYPE_CHECKING:
    from transformers import TrainerCallback
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

COLUMNS = ("prompt", "chosen", "rejected")


def train_dpo(
    *,
    base_model: Path,
    dataset_dir: Path,
    out_dir: Path,
    config: DPOTrainingConfig | None = None,
    db: Database | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> TrainResult:
    """Train on `dataset_dir`/strategy_dpo and save the adapter (or full model) into `out_dir`.

    `base_model` is usually the SFT result merged into the base, or the base itself.
    """
    config = config or DPOTrainingConfig()
    method = TrlMethod(
        kind="dpo",
        dataset="strategy_dpo",
        columns=COLUMNS,
        trl_classes=_trl_classes,
        measure=_measure,
        options={"beta": config.beta, "loss_type": [config.loss_type]},
    )
    return run_trl_trainer(
        method, config, base_model=base_model, dataset_dir=dataset_dir, out_dir=out_dir, db=db, callbacks=callbacks
    )


def _trl_classes() -> tuple[type[DPOConfig], type[DPOTrainer]]:
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    return DPOConfig, DPOTrainer


def _measure(held_out: HeldOut, prefix: str) -> dict[str, float | None]:
    """The mean log-probability margin of the chosen strategy over the rejected one, held out."""
    return {f"{prefix}eval_margin": preference_margin(held_out.trainer.model, held_out.tokenizer, held_out.evaluation)}
