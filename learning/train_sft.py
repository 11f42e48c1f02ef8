"""Supervised fine-tuning of the strategy model on strategy_sft (TRL's SFTTrainer, LoRA by default).

The model learns to write, for a rendered s1, the strategies that reviewers received well. The run
reports the held-out loss and the share of greedily generated strategies that validate against the
Strategy schema, both before and after training, and stores its step metrics in `training_runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.store.db import Database
from learning.configs import SFTTrainingConfig
from learning.training import (
    TrainResult,
    check_base_model,
    generate_completions,
    load_base_model,
    load_training_split,
    lora_config,
    prepare_out_dir,
    recorded_run,
    resolve_device,
    step_metrics_callback,
    trainer_arguments,
    use_bf16,
    valid_strategy_share,
    write_training_file,
)

if TYPE_CHECKING:
    from transformers import TrainerCallback

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
    check_base_model(base_model)
    train, evaluation, snapshot = load_training_split(
        dataset_dir, "strategy_sft", COLUMNS, min_rows=config.min_train_rows
    )
    device = resolve_device(config)
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    out_dir = prepare_out_dir(out_dir)
    with recorded_run(db, "sft", config, base_model=base_model, dataset=dataset_dir) as run:
        model, tokenizer = load_base_model(base_model, bf16=use_bf16(config, device))
        args = SFTConfig(
            **trainer_arguments(config, out_dir, device=device), completion_only_loss=config.completion_only_loss
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=evaluation if len(evaluation) else None,
            processing_class=tokenizer,
            peft_config=lora_config(config) if config.use_lora else None,
            callbacks=[step_metrics_callback(run.log), *callbacks],
        )
        sample = [row["prompt"] for row in evaluation.select(range(min(len(evaluation), config.validity_sample)))]

        def measure(prefix: str) -> dict[str, float | None]:
            loss = float(trainer.evaluate()["eval_loss"]) if len(evaluation) else None
            texts = generate_completions(
                trainer.model, tokenizer, sample, max_new_tokens=config.validity_max_new_tokens
            )
            return {
                f"{prefix}eval_loss": loss,
                f"{prefix}valid_strategy_share": valid_strategy_share(texts) if sample else None,
            }

        metrics = measure("before_")
        output = trainer.train()
        metrics |= measure("after_")
        metrics |= {"train_loss": float(output.training_loss), "steps": float(output.global_step)}
        trainer.save_model(str(out_dir))
        result = TrainResult(
            kind="sft",
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
