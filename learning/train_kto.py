"""Kahneman-Tversky optimisation of the strategy model on strategy_kto (TRL's KTOTrainer).

KTO learns from unpaired judgments: a strategy that earned a clearly good reward is desirable, one
that earned a clearly bad reward is not, and no second strategy for the same merge request is
needed. That fits the feedback most teams give (a thumbs-up or -down on what was posted).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from agent.store.db import Database
from learning.train_configs import KTOTrainingConfig
from learning.training import (
    CausalLM,
    HeldOut,
    TrainResult,
    TrlMethod,
    completion_logprob,
    held_out_loss,
    run_trl_trainer,
)
from reviewers.kernel.errors import TrainingError

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl.trainer.kto_config import KTOConfig
    from trl.trainer.kto_trainer import KTOTrainer

COLUMNS = ("prompt", "completion", "label")


def train_kto(
    *,
    base_model: Path,
    dataset_dir: Path,
    out_dir: Path,
    config: KTOTrainingConfig | None = None,
    db: Database | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> TrainResult:
    """Train on `dataset_dir`/strategy_kto and save the adapter (or full model) into `out_dir`."""
    config = config or KTOTrainingConfig()
    if config.per_device_train_batch_size < 2:
        # KTO estimates its KL term from mismatched pairs inside a micro-batch
        raise TrainingError("KTO needs per_device_train_batch_size of at least 2")
    method = TrlMethod(
        kind="kto",
        dataset="strategy_kto",
        columns=COLUMNS,
        trl_classes=_trl_classes,
        measure=_measure,
        options={
            "beta": config.beta,
            "desirable_weight": config.desirable_weight,
            "undesirable_weight": config.undesirable_weight,
        },
        check_train=partial(_check_labels, dataset_dir),
        # TRL builds those mismatched pairs in the held-out split too, a train micro-batch at a time, so
        # a held-out split smaller than one micro-batch is not evaluated
        min_eval_rows=config.per_device_train_batch_size,
    )
    return run_trl_trainer(
        method, config, base_model=base_model, dataset_dir=dataset_dir, out_dir=out_dir, db=db, callbacks=callbacks
    )


def _trl_classes() -> tuple[type[KTOConfig], type[KTOTrainer]]:
    from trl.trainer.kto_config import KTOConfig
    from trl.trainer.kto_trainer import KTOTrainer

    return KTOConfig, KTOTrainer


def _check_labels(dataset_dir: Path, train: Dataset) -> None:
    """KTO weighs desirable against undesirable examples, so the train split must hold both."""
    if len(set(train["label"])) < 2:
        raise TrainingError(
            f"the strategy_kto train split in {dataset_dir} needs both desirable and undesirable examples"
        )


def desirability_gap(held_out: HeldOut) -> float | None:
    """Mean log p(completion | prompt) of the held-out desirable strategies minus that of the undesirable
    ones: what KTO should widen (None unless the held-out split has both kinds)."""
    rows = held_out.evaluation
    if len(rows) == 0 or len(set(rows["label"])) < 2:
        return None
    model: CausalLM = held_out.trainer.model
    was_training = model.training
    model.eval()
    try:
        scores: dict[bool, list[float]] = {True: [], False: []}
        for row in rows:
            scores[bool(row["label"])].append(
                completion_logprob(model, held_out.tokenizer, row["prompt"], row["completion"])
            )
    finally:
        model.train(was_training)
    return sum(scores[True]) / len(scores[True]) - sum(scores[False]) / len(scores[False])


def _measure(held_out: HeldOut, prefix: str) -> dict[str, float | None]:
    return {f"{prefix}eval_loss": held_out_loss(held_out), f"{prefix}eval_desirable_gap": desirability_gap(held_out)}
