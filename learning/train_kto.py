"""Kahneman-Tversky optimisation of the strategy model on strategy_kto (TRL's KTOTrainer).

KTO learns from unpaired judgments: a strategy that earned a clearly good reward is desirable, one
that earned a clearly bad reward is not, and no second strategy for the same merge request is
needed. That fits the feedback most teams give (a thumbs-up or -down on what was posted).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.store.db import Database
from learning.configs import KTOTrainingConfig
from learning.training import (
    TrainResult,
    check_base_model,
    load_base_model,
    load_training_split,
    lora_config,
    prepare_out_dir,
    recorded_run,
    resolve_device,
    step_metrics_callback,
    trainer_arguments,
    use_bf16,
    write_training_file,
)
from reviewers.errors import TrainingError

if TYPE_CHECKING:
    from transformers import TrainerCallback

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
    check_base_model(base_model)
    train, evaluation, snapshot = load_training_split(
        dataset_dir, "strategy_kto", COLUMNS, min_rows=config.min_train_rows
    )
    if len(set(train["label"])) < 2:
        raise TrainingError(
            f"the strategy_kto train split in {dataset_dir} needs both desirable and undesirable examples"
        )
    device = resolve_device(config)
    from trl.trainer.kto_config import KTOConfig
    from trl.trainer.kto_trainer import KTOTrainer

    out_dir = prepare_out_dir(out_dir)
    with recorded_run(db, "kto", config, base_model=base_model, dataset=dataset_dir) as run:
        model, tokenizer = load_base_model(base_model, bf16=use_bf16(config, device))
        args = KTOConfig(
            **trainer_arguments(config, out_dir, device=device),
            beta=config.beta,
            desirable_weight=config.desirable_weight,
            undesirable_weight=config.undesirable_weight,
        )
        has_eval = len(evaluation) >= config.per_device_train_batch_size
        trainer = KTOTrainer(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=evaluation if has_eval else None,
            processing_class=tokenizer,
            peft_config=lora_config(config) if config.use_lora else None,
            callbacks=[step_metrics_callback(run.log), *callbacks],
        )
        metrics: dict[str, float | None] = {
            "before_eval_loss": float(trainer.evaluate()["eval_loss"]) if has_eval else None
        }
        output = trainer.train()
        metrics |= {
            "after_eval_loss": float(trainer.evaluate()["eval_loss"]) if has_eval else None,
            "train_loss": float(output.training_loss),
            "steps": float(output.global_step),
        }
        trainer.save_model(str(out_dir))
        result = TrainResult(
            kind="kto",
            out_dir=out_dir,
            base_model=str(base_model),
            dataset_snapshot=snapshot,
            run_id=run.run_id,
            metrics=metrics,
            step_metrics=run.steps,
            uses_lora=config.use_lora,
        )
        write_training_file(result, config)
        run.finish(metrics=metrics)
    return result
