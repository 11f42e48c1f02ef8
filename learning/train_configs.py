"""The training methods' configurations: one dataclass per method, every field with a default and help.

The defaults suit a real instruct model (a Qwen2.5 of a few billion parameters) on one GPU with
LoRA; tests and CPU demos override a handful of fields. A config can also come from a JSON or TOML
file whose keys are the field names (`load_config`); an unknown key or a wrong type is one clear
line, not a traceback.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar, get_type_hints

from reviewers.kernel.errors import ConfigError

Device = Literal["auto", "cpu", "cuda"]


@dataclass
class TrainConfig:
    """What every trainer shares: optimisation, LoRA, device, and how much data is enough."""

    learning_rate: float = field(default=1e-4, metadata={"help": "peak learning rate of AdamW"})
    max_steps: int = field(default=-1, metadata={"help": "optimizer steps; -1 trains for num_train_epochs"})
    num_train_epochs: float = field(default=3.0, metadata={"help": "passes over the train split when max_steps=-1"})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "examples per device per micro-batch"})
    gradient_accumulation_steps: int = field(default=4, metadata={"help": "micro-batches per optimizer step"})
    warmup_steps: float = field(
        default=0.03, metadata={"help": "linear LR warm-up: steps if ≥ 1, else a share of all steps"}
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    max_length: int = field(
        default=2048, metadata={"help": "tokens per example (prompt + completion); longer ones are truncated"}
    )
    seed: int = field(default=0, metadata={"help": "seed for data order, LoRA init and dropout"})
    logging_steps: int = field(default=1, metadata={"help": "log (and store) metrics every this many steps"})
    use_lora: bool = field(default=True, metadata={"help": "train a LoRA adapter (peft) instead of every weight"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (scale = alpha / r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA branch"})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={"help": "module names to adapt; None adapts every linear layer except the output head"},
    )
    lora_modules_to_save: list[str] | None = field(
        default=None,
        metadata={
            "help": "modules trained in full beside the adapter and saved with it (e.g. a new head, or the"
            " final norm of a randomly initialised test model whose output scale LoRA alone cannot move)"
        },
    )
    device: Device = field(default="auto", metadata={"help": "auto uses CUDA when available, else the CPU"})
    cpu_threads: int | None = field(
        default=None,
        metadata={"help": "torch threads on the CPU; None keeps torch's default (1 is fastest on a busy machine)"},
    )
    bf16: bool | None = field(default=None, metadata={"help": "bfloat16 mixed precision; None = on for CUDA"})
    activation_checkpointing: bool = field(
        default=False, metadata={"help": "trade compute for memory on long prompts (large models)"}
    )
    min_train_rows: int = field(
        default=8, metadata={"help": "refuse to train on fewer train examples than this: too small to learn from"}
    )
    eval_batch_size: int = field(default=8, metadata={"help": "examples per batch when measuring before/after"})


@dataclass
class SFTTrainingConfig(TrainConfig):
    """Supervised fine-tuning on strategy_sft: learn to write the strategies that were well received."""

    completion_only_loss: bool = field(
        default=True, metadata={"help": "loss on the strategy tokens only, not on the prompt"}
    )
    validity_max_new_tokens: int = field(
        default=384, metadata={"help": "tokens generated per prompt when measuring the share of valid strategies"}
    )
    validity_sample: int = field(
        default=16, metadata={"help": "held-out prompts decoded greedily to measure valid-strategy share"}
    )


@dataclass
class DPOTrainingConfig(TrainConfig):
    """Direct preference optimisation on strategy_dpo: prefer the strategy that earned more reward."""

    learning_rate: float = field(default=5e-6, metadata={"help": "peak learning rate of AdamW"})
    beta: float = field(default=0.1, metadata={"help": "DPO temperature: how far the policy may leave the reference"})
    loss_type: str = field(default="sigmoid", metadata={"help": "TRL DPO loss: sigmoid, ipo, hinge, robust, ..."})
    min_train_rows: int = field(default=4, metadata={"help": "refuse to train on fewer preference pairs than this"})


@dataclass
class KTOTrainingConfig(TrainConfig):
    """Kahneman-Tversky optimisation on strategy_kto: unpaired thumbs-up and thumbs-down strategies."""

    learning_rate: float = field(default=5e-6, metadata={"help": "peak learning rate of AdamW"})
    beta: float = field(default=0.1, metadata={"help": "KTO temperature: how far the policy may leave the reference"})
    desirable_weight: float = field(default=1.0, metadata={"help": "loss weight of desirable examples"})
    undesirable_weight: float = field(default=1.0, metadata={"help": "loss weight of undesirable examples"})
    min_train_rows: int = field(default=4, metadata={"help": "refuse to train on fewer labeled examples than this"})


C = TypeVar("C", bound=TrainConfig)


def config_help(cls: type[TrainConfig]) -> dict[str, tuple[Any, str]]:
    """field name → (default, help), for `--help` texts and the docs."""
    out: dict[str, tuple[Any, str]] = {}
    for f in fields(cls):
        default = f.default if f.default is not MISSING else None
        out[f.name] = (default, str(f.metadata.get("help", "")))
    return out


def load_config(cls: type[C], path: Path | None, **overrides: Any) -> C:
    """`cls` from a JSON or TOML file (or its defaults), then `overrides`; bad keys are a ConfigError."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read training config {path}: {exc.strerror or exc}") from exc
        try:
            loaded = tomllib.loads(text) if Path(path).suffix == ".toml" else json.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"training config {path} is not valid {Path(path).suffix[1:] or 'JSON'}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"training config {path} must be a table of field = value")
        values.update(loaded)
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    hints = get_type_hints(cls)
    for name, value in values.items():
        _check_type(name, value, hints[name])
    return cls(**values)


def _check_type(name: str, value: Any, hint: Any) -> None:
    """A light check of file values against the field types (JSON has no int/float distinction)."""
    expected: tuple[type, ...]
    text = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
    if hint is bool:
        expected = (bool,)
    elif hint is int:
        expected = (int,)
    elif hint is float:
        expected = (int, float)
    elif hint is str or text.startswith("Literal"):
        expected = (str,)
    else:
        return  # optional and list fields: the trainer validates them
    if not isinstance(value, expected) or (hint is not bool and isinstance(value, bool)):
        raise ConfigError(f"training config field {name} must be {text}, got {value!r}")
    if text.startswith("Literal") and value not in hint.__args__:
        raise ConfigError(f"training config field {name} must be one of {', '.join(hint.__args__)}, got {value!r}")
