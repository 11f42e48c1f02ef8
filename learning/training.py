"""What the SFT, DPO and KTO trainers share: loading the base model, LoRA, the device, step metrics
stored in `training_runs`, saving, and the before/after measurements each run reports. The run
itself (check, load, train under a recorded run, measure, save) is `run_trl_trainer`; each method
hands it a `TrlMethod` saying what sets it apart.

The same code runs a tiny CPU model in tests and a real instruct model on a GPU: the device and
precision come from the config (`auto` → CUDA with bfloat16 when present, else the CPU in float32),
and TRL's trainers (on accelerate) do the rest. Multi-GPU runs go through `accelerate launch`.
Heavy imports (torch, transformers, peft, TRL) happen inside the functions so that importing this
module stays cheap.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent.llm.structured import InvalidOutput
from agent.store.db import Database
from agent.store.models import TrainingKind, finish_run, log_step, start_run
from agent.strategy import parse_valid_strategy
from learning.datasets import DatasetKind, load_dataset, read_card
from learning.train_configs import TrainConfig
from reviewers.kernel.errors import TrainingError

if TYPE_CHECKING:
    import torch
    from datasets import Dataset, DatasetDict
    from peft import LoraConfig
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback, TrainingArguments

log = logging.getLogger(__name__)

TRAINING_FILE = "training.json"  # written next to the adapter: what it was trained from and how
Messages = list[dict[str, str]]
# A causal LM, plain or wrapped by peft (a PeftModel forwards to it); transformers' and peft's own
# annotations do not describe the union, so measurements take it untyped.
CausalLM = Any


@dataclass
class TrainResult:
    """What a training run produced: the adapter (or full model) directory and its numbers."""

    kind: TrainingKind
    out_dir: Path
    base_model: str
    dataset_snapshot: str
    run_id: int | None
    metrics: dict[str, float | None]
    step_metrics: list[dict[str, Any]] = field(default_factory=list)
    uses_lora: bool = True


# --- device, model, LoRA ---------------------------------------------------------------------------


def resolve_device(config: TrainConfig) -> Literal["cpu", "cuda"]:
    import torch

    if config.device == "cuda" and not torch.cuda.is_available():
        raise TrainingError("device is cuda but no CUDA device is available")
    device: Literal["cpu", "cuda"] = (
        ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device
    )
    if device == "cpu" and config.cpu_threads is not None:
        torch.set_num_threads(config.cpu_threads)
    return device


def use_bf16(config: TrainConfig, device: str) -> bool:
    return config.bf16 if config.bf16 is not None else device == "cuda"


def check_base_model(base_model: Path) -> Path:
    """A local model directory (config and weights saved with `save_pretrained`); never a hub id."""
    path = Path(base_model)
    if not path.exists():
        raise TrainingError(f"base model path {path} does not exist")
    if not (path / "config.json").is_file():
        raise TrainingError(f"base model path {path} is not a model directory (no config.json)")
    return path


def load_base_model(base_model: Path, *, bf16: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = check_base_model(base_model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.bfloat16 if bf16 else torch.float32, local_files_only=True
        )
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load the base model from {path}: {str(exc).splitlines()[0]}") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise TrainingError(f"the tokenizer in {path} has no chat template; use an instruct/chat model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer  # the trainer moves it to the device


def lora_config(config: TrainConfig) -> LoraConfig:
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM",
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        # "all-linear": every linear layer but the output head, whatever the architecture names them
        target_modules=config.lora_target_modules or "all-linear",
        modules_to_save=config.lora_modules_to_save,
    )


def trainer_arguments(config: TrainConfig, out_dir: Path, *, device: str) -> dict[str, Any]:
    """The TrainingArguments fields every TRL config takes, from our config."""
    return {
        "output_dir": str(out_dir),
        "learning_rate": config.learning_rate,
        "max_steps": config.max_steps,
        "num_train_epochs": config.num_train_epochs,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "per_device_eval_batch_size": config.eval_batch_size,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "warmup_steps": config.warmup_steps,
        "weight_decay": config.weight_decay,
        "max_grad_norm": config.max_grad_norm,
        "max_length": config.max_length,
        "seed": config.seed,
        "logging_steps": config.logging_steps,
        "activation_checkpointing": config.activation_checkpointing,
        "use_cpu": device == "cpu",
        "bf16": use_bf16(config, device),
        "save_strategy": "no",
        "eval_strategy": "no",  # before/after evaluation is ours, outside the loop
        "report_to": "none",
        "dataloader_num_workers": 0,
    }


def prepare_out_dir(out_dir: Path) -> Path:
    """An empty output directory: a half-overwritten adapter next to stale files would load wrongly."""
    path = Path(out_dir)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise TrainingError(f"output directory {path} is not empty; choose a new one")
    path.mkdir(parents=True, exist_ok=True)
    return path


def merge_adapter(*, base_model: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Fold a LoRA adapter into its base and save a plain model: the next stage's base (SFT → DPO)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_base_model(base_model)
    if not (Path(adapter_dir) / "adapter_config.json").is_file():
        raise TrainingError(f"{adapter_dir} holds no LoRA adapter (no adapter_config.json)")
    out = prepare_out_dir(out_dir)
    model = AutoModelForCausalLM.from_pretrained(str(base_model), local_files_only=True)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(adapter_dir)).save_pretrained(str(out))
    return out


# --- data ------------------------------------------------------------------------------------------


def load_training_split(
    dataset_dir: Path, kind: DatasetKind, columns: Sequence[str], *, min_rows: int
) -> tuple[Dataset, Dataset, str]:
    """(train, eval, snapshot id) of one dataset kind, refusing a train split too small to learn from."""
    dd: DatasetDict = load_dataset(dataset_dir, kind)
    snapshot = read_card(dataset_dir).snapshot_id
    train, evaluation = dd["train"].select_columns(list(columns)), dd["eval"].select_columns(list(columns))
    if len(train) < min_rows:
        raise TrainingError(
            f"the {kind} train split in {dataset_dir} has {len(train)} examples; at least {min_rows} are"
            " needed (min_train_rows)"
        )
    return train, evaluation, snapshot


# --- step metrics ----------------------------------------------------------------------------------


def step_metrics_callback(sink: Callable[[dict[str, Any]], None]) -> TrainerCallback:
    """A TrainerCallback handing each logged step's metrics (with the step number) to `sink`."""
    from transformers import TrainerCallback

    class StepMetrics(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any) -> None:
            if logs:
                sink({"step": int(state.global_step), **{k: _number(v) for k, v in logs.items()}})

    return StepMetrics()


def _number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunRecorder:
    """Keeps a run's step metrics in memory and, with a store, in its `training_runs` row."""

    def __init__(self, db: Database | None, kind: TrainingKind, config: Mapping[str, Any]) -> None:
        self.db = db
        self.steps: list[dict[str, Any]] = []
        self.run_id = start_run(db, kind, config) if db is not None else None

    def log(self, metrics: dict[str, Any]) -> None:
        self.steps.append(metrics)
        log.info("step %s: %s", metrics.get("step"), metrics)
        if self.db is not None and self.run_id is not None:
            log_step(self.db, self.run_id, metrics)

    def finish(self, *, metrics: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        if self.db is None or self.run_id is None:
            return
        status: Literal["succeeded", "failed"] = "failed" if error else "succeeded"
        finish_run(self.db, self.run_id, status=status, metrics=metrics, reason=error)


@contextmanager
def recorded_run(db: Database | None, kind: TrainingKind, config: TrainConfig, **context: Any) -> Iterator[RunRecorder]:
    """A run row that ends `failed` with the error's first line if the body raises."""
    recorder = RunRecorder(db, kind, {**asdict(config), **{k: str(v) for k, v in context.items()}})
    try:
        yield recorder
    except BaseException as exc:
        recorder.finish(error=(str(exc).strip().splitlines() or [type(exc).__name__])[0])
        raise


def write_training_file(result: TrainResult, config: TrainConfig) -> None:
    payload = {
        "kind": result.kind,
        "base_model": result.base_model,
        "dataset_snapshot": result.dataset_snapshot,
        "run_id": result.run_id,
        "uses_lora": result.uses_lora,
        "metrics": result.metrics,
        "config": asdict(config),
    }
    (result.out_dir / TRAINING_FILE).write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")


def read_training_file(out_dir: Path) -> dict[str, Any]:
    path = Path(out_dir) / TRAINING_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TrainingError(f"{out_dir} holds no trained model ({TRAINING_FILE} is missing)") from exc
    except (OSError, ValueError) as exc:
        raise TrainingError(f"{path} is corrupt: {exc}") from exc
    if not isinstance(data, dict):
        raise TrainingError(f"{path} is corrupt: not an object")
    return data


# --- the run every TRL method shares ---------------------------------------------------------------


@dataclass(frozen=True)
class HeldOut:
    """What a method's before/after measurement reads; `trainer.model` is the model being trained."""

    trainer: Trainer
    tokenizer: PreTrainedTokenizerBase
    evaluation: Dataset  # the held-out split as loaded, not the trainer's tokenised copy
    evaluated: bool  # whether the trainer was given the split, so `trainer.evaluate()` can run


Measure = Callable[[HeldOut, str], dict[str, float | None]]


@dataclass(frozen=True)
class TrlMethod:
    """What sets one TRL method (SFT, DPO, KTO) apart; `run_trl_trainer` does everything they share."""

    kind: TrainingKind
    dataset: DatasetKind
    columns: tuple[str, ...]
    # (TRL config class, TRL trainer class): a function, because TRL is slow to import and is only
    # imported once the inputs have passed their checks
    trl_classes: Callable[[], tuple[Callable[..., TrainingArguments], Callable[..., Trainer]]]
    # held-out metrics with every key starting with the prefix given ("before_" or "after_")
    measure: Measure
    options: Mapping[str, Any] = field(default_factory=dict)  # TRL config fields beyond trainer_arguments
    check_train: Callable[[Dataset], None] | None = None  # refuses a train split the method cannot learn from
    min_eval_rows: int = 1  # a smaller held-out split is not given to the trainer


def run_trl_trainer(
    method: TrlMethod,
    config: TrainConfig,
    *,
    base_model: Path,
    dataset_dir: Path,
    out_dir: Path,
    db: Database | None,
    callbacks: Sequence[TrainerCallback],
) -> TrainResult:
    """Train `method` on `dataset_dir`, measuring before and after, and save into `out_dir`.

    The cheap checks (base model path, dataset, the method's own, device) come before the output
    directory and the `training_runs` row are created, so a bad invocation leaves nothing behind;
    anything failing later marks the row failed.
    """
    check_base_model(base_model)
    train, evaluation, snapshot = load_training_split(
        dataset_dir, method.dataset, method.columns, min_rows=config.min_train_rows
    )
    if method.check_train is not None:
        method.check_train(train)
    device = resolve_device(config)
    config_class, trainer_class = method.trl_classes()

    out_dir = prepare_out_dir(out_dir)
    with recorded_run(db, method.kind, config, base_model=base_model, dataset=dataset_dir) as run:
        model, tokenizer = load_base_model(base_model, bf16=use_bf16(config, device))
        args = config_class(**trainer_arguments(config, out_dir, device=device), **method.options)
        evaluated = len(evaluation) >= method.min_eval_rows
        trainer = trainer_class(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=evaluation if evaluated else None,
            processing_class=tokenizer,
            peft_config=lora_config(config) if config.use_lora else None,
            callbacks=[step_metrics_callback(run.log), *callbacks],
        )
        held_out = HeldOut(trainer=trainer, tokenizer=tokenizer, evaluation=evaluation, evaluated=evaluated)
        metrics = method.measure(held_out, "before_")
        output = trainer.train()
        metrics |= method.measure(held_out, "after_")
        metrics |= {"train_loss": float(output.training_loss), "steps": float(output.global_step)}
        trainer.save_model(str(out_dir))
        result = TrainResult(
            kind=method.kind,
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


# --- measurements ----------------------------------------------------------------------------------


def held_out_loss(held_out: HeldOut) -> float | None:
    """The trainer's loss on the held-out split; None when it was not given one."""
    return float(held_out.trainer.evaluate()["eval_loss"]) if held_out.evaluated else None


def _chat_text(tokenizer: PreTrainedTokenizerBase, messages: Messages, *, generation_prompt: bool) -> str:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    return str(text)


def generate_completions(
    model: CausalLM,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Messages],
    *,
    max_new_tokens: int,
    batch_size: int = 8,
) -> list[str]:
    """Greedy completions of chat prompts (deterministic: what the strategy node would get at T=0)."""
    import torch

    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # decoder-only: new tokens follow the prompt directly
    out: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            texts = [_chat_text(tokenizer, p, generation_prompt=True) for p in prompts[start : start + batch_size]]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.no_grad():
                ids = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                )
            new = ids[:, enc["input_ids"].shape[1] :]
            out.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


def is_valid_strategy(text: str) -> bool:
    """Whether `text` holds a strategy, parsed as serving, the gate and RL parse it
    (`agent.strategy.parse_valid_strategy`; no merge request here to check the plan against)."""
    try:
        parse_valid_strategy(text)
    except InvalidOutput:
        return False
    return True


def valid_strategy_share(texts: Sequence[str]) -> float:
    """The share of texts that parse and validate as a Strategy."""
    return sum(1 for t in texts if is_valid_strategy(t)) / len(texts) if texts else 0.0


def completion_logprob(
    model: CausalLM, tokenizer: PreTrainedTokenizerBase, prompt: Messages, completion: Messages
) -> float:
    """log p(completion | prompt), summed over the completion's tokens (end-of-turn included)."""
    import torch

    prompt_ids = tokenizer(_chat_text(tokenizer, prompt, generation_prompt=True), add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(_chat_text(tokenizer, prompt + completion, generation_prompt=False), add_special_tokens=False)[
        "input_ids"
    ]
    if full_ids[: len(prompt_ids)] != prompt_ids or len(full_ids) <= len(prompt_ids):
        raise TrainingError("the chat template does not render the prompt as a prefix of the conversation")
    ids = torch.tensor([full_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    logps = torch.log_softmax(logits[0, :-1], dim=-1)
    targets = ids[0, 1:]
    picked = logps.gather(1, targets.unsqueeze(1)).squeeze(1)
    return float(picked[len(prompt_ids) - 1 :].sum())


def preference_margin(model: CausalLM, tokenizer: PreTrainedTokenizerBase, pairs: Dataset) -> float | None:
    """Mean of log p(chosen) − log p(rejected) over preference pairs; None without pairs."""
    if len(pairs) == 0:
        return None
    was_training = model.training
    model.eval()
    try:
        margins = [
            completion_logprob(model, tokenizer, row["prompt"], row["chosen"])
            - completion_logprob(model, tokenizer, row["prompt"], row["rejected"])
            for row in pairs
        ]
    finally:
        model.train(was_training)
    return sum(margins) / len(margins)


def trainable_state(model: CausalLM) -> dict[str, torch.Tensor]:
    """A copy of the parameters that training updates (the LoRA weights under peft)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def changed_parameters(before: Mapping[str, torch.Tensor], model: CausalLM) -> int:
    """How many of the trainable tensors in `before` differ in `model` now."""
    import torch

    now = dict(model.named_parameters())
    return sum(1 for n, t in before.items() if n in now and not torch.equal(t, now[n].detach()))
