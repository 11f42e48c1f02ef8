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
from learning.configs import DPOTrainingConfig
from learning.training import (
    TrainResult,
    check_base_model,
    load_base_model,
    load_training_split,
    lora_config,
    preference_margin,
    prepare_out_dir,
    recorded_run,
    resolve_device,
    step_metrics_callback,
    trainer_arguments,
    use_bf16,
    write_training_file,
)

if TYPE_CHECKING:
    from transformers import TrainerCallback

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
    check_base_model(base_model)
    train, evaluation, snapshot = load_training_split(
        dataset_dir, "strategy_dpo", COLUMNS, min_rows=config.min_train_rows
    )
    device = resolve_device(config)
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    out_dir = prepare_out_dir(out_dir)
    with recorded_run(db, "dpo", config, base_model=base_model, dataset=dataset_dir) as run:
        model, tokenizer = load_base_model(base_model, bf16=use_bf16(config, device))
        args = DPOConfig(
            **trainer_arguments(config, out_dir, device=device), beta=config.beta, loss_type=[config.loss_type]
        )
        trainer = DPOTrainer(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=evaluation if len(evaluation) else None,
            processing_class=tokenizer,
            peft_config=lora_config(config) if config.use_lora else None,
            callbacks=[step_metrics_callback(run.log), *callbacks],
        )
        metrics: dict[str, float | None] = {
            "before_eval_margin": preference_margin(trainer.model, tokenizer, evaluation)
        }
        output = trainer.train()
        metrics |= {
            "after_eval_margin": preference_margin(trainer.model, tokenizer, evaluation),
            "train_loss": float(output.training_loss),
            "steps": float(output.global_step),
        }
        trainer.save_model(str(out_dir))
        result = TrainResult(
            kind="dpo",
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
