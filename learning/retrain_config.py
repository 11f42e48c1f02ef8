"""`RetrainConfig`: what `reviewloop retrain` does, every field with a default and a help string.

The defaults suit a production store and a real instruct model on one GPU: each stage needs a few
dozen examples before it trains, and the gate wants a margin of improvement on at least a handful
of held-out merge requests. The per-method settings (`sft`, `dpo`, `kto`, `rl`, `reward`) are the
trainers' own config classes (`rl` is `reviewloop train rl`'s, with its sections). A config file
(JSON, or TOML with `[sft]`, `[rl.strata]`, … tables) names only what it changes; an unknown key or
a value of the wrong type is one clear line.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from learning.feedback_labels import FeedbackRewardConfig
from learning.train_configs import DPOTrainingConfig, KTOTrainingConfig, SFTTrainingConfig
from learning.train_rl import RLRunConfig
from reviewers.kernel.errors import ConfigError

# vLLM refuses adapters above its `--max-lora-rank`; deploy/ starts it with 32.
DEFAULT_MAX_LORA_RANK = 32


@dataclass
class RetrainConfig:
    """The retraining pipeline: which stages run, how much data each needs, and the gate's margin."""

    base_model: Path | None = field(
        default=None,
        metadata={"help": "local base model directory (save_pretrained); the CLI fills it from the settings"},
    )
    work_dir: Path = field(
        default=Path("retrain"),
        metadata={"help": "each run writes its datasets and adapters under <work_dir>/run-<id>/ (keep it: the"
                  " registered adapters live there)"},
    )  # fmt: skip
    eval_fraction: float = field(
        default=0.2, metadata={"help": "share of merge requests, the most recent, held out for the gate"}
    )
    min_sft_examples: int = field(
        default=32, metadata={"help": "SFT runs when strategy_sft's train split has at least this many examples"}
    )
    min_dpo_pairs: int = field(
        default=16, metadata={"help": "DPO runs when strategy_dpo's train split has at least this many pairs"}
    )
    min_kto_labels: int = field(
        default=32,
        metadata={"help": "without enough DPO pairs, KTO runs when strategy_kto has at least this many labels"},
    )
    min_replay_cases: int = field(
        default=16, metadata={"help": "StraTA RL runs when the replay train split has at least this many cases"}
    )
    min_eval_cases: int = field(
        default=8, metadata={"help": "the gate decides only on at least this many held-out replay cases"}
    )
    margin: float = field(
        default=0.0,
        metadata={
            "help": "promote only when the paired 95% lower bound of the candidate's per-MR replay reward difference "
            "(vs the model in service and vs the best fixed rule) is above this"
        },
    )
    run_sft: bool = field(default=True, metadata={"help": "run the SFT stage (when its data suffices)"})
    run_preference: bool = field(default=True, metadata={"help": "run the DPO/KTO stage (when its data suffices)"})
    run_rl: bool = field(default=True, metadata={"help": "run the StraTA RL stage (when its data suffices)"})
    promote: bool = field(
        default=True, metadata={"help": "put a candidate the gate accepts in service (off: gate and report only)"}
    )
    max_lora_rank: int | None = field(
        default=DEFAULT_MAX_LORA_RANK,
        metadata={"help": "rank cap of the combined candidate adapter (vLLM's --max-lora-rank); None: no cap"},
    )
    keep_merged: bool = field(
        default=False,
        metadata={"help": "keep the full merged models between stages (large) instead of deleting them at the end"},
    )
    sft: SFTTrainingConfig = field(default_factory=SFTTrainingConfig, metadata={"help": "the SFT trainer's config"})
    dpo: DPOTrainingConfig = field(default_factory=DPOTrainingConfig, metadata={"help": "the DPO trainer's config"})
    kto: KTOTrainingConfig = field(default_factory=KTOTrainingConfig, metadata={"help": "the KTO trainer's config"})
    gate_vs_best_fixed: bool = field(
        default=True,
        metadata={
            "help": "the gate also requires the candidate to beat the best fixed plan rule on the same MRs "
            "(paired lower bound above the margin): a model that learned one fixed habit is not promoted"
        },
    )
    gate_max_new_tokens: int = field(
        default=384, metadata={"help": "tokens a model may write per strategy in the gate (z renders to ~200)"}
    )
    rl: RLRunConfig = field(
        default_factory=RLRunConfig,
        metadata={"help": "StraTA RL's run config (tables strata, train, policy, env, reward, eval, vllm); its env"
                  " and reward also drive the gate's replay. Its plans are sampled as the candidate will be"
                  " asked for them (learning.train_rl.served_train)"},
    )  # fmt: skip
    reward: FeedbackRewardConfig = field(
        default_factory=FeedbackRewardConfig, metadata={"help": "feedback reward weights and dataset thresholds"}
    )

    def __post_init__(self) -> None:
        problems = [
            f"{name}={getattr(self, name)} (must be >= 1)"
            for name in ("min_sft_examples", "min_dpo_pairs", "min_kto_labels", "min_replay_cases", "min_eval_cases")
            if getattr(self, name) < 1
        ]
        if not 0.0 < self.eval_fraction < 1.0:
            problems.append(f"eval_fraction={self.eval_fraction} (must be in (0, 1): the gate needs held-out data)")
        if self.margin < 0:
            problems.append(f"margin={self.margin} (must be >= 0)")
        if self.gate_max_new_tokens < 1:
            problems.append(f"gate_max_new_tokens={self.gate_max_new_tokens} (must be >= 1)")
        if self.max_lora_rank is not None and self.max_lora_rank < 1:
            problems.append(f"max_lora_rank={self.max_lora_rank} (must be >= 1)")
        if problems:
            raise ConfigError("invalid retrain config: " + "; ".join(problems))


D = TypeVar("D")


def load_retrain_config(path: Path | None, **overrides: Any) -> RetrainConfig:
    """The config from a JSON or TOML file (or the defaults), then `overrides` (None values ignored)."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(read_config_file(Path(path)))
    values.update({k: v for k, v in overrides.items() if v is not None})
    return from_mapping(RetrainConfig, values, where="retrain config")


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read retrain config {path}: {exc.strerror or exc}") from exc
    try:
        loaded = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"retrain config {path} is not valid {path.suffix[1:] or 'JSON'}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"retrain config {path} must be a table of field = value")
    return loaded


def from_mapping(cls: type[D], values: Mapping[str, Any], *, where: str, base: D | None = None) -> D:
    """A dataclass from plain values: nested tables become nested configs, lists become tuples where
    the field is a tuple, strings become paths where it is a Path; anything else must already fit.
    A table overrides only the fields it names: the rest keep the field's default (or `base`'s), so
    `[rl.train] mrs_per_step = 4` keeps the retrain's other RL defaults."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls} is not a dataclass")
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {where} field(s): {', '.join(unknown)}")
    defaults = _defaults(cls, base, [n for n, v in values.items() if isinstance(v, Mapping)])
    kwargs = {
        name: _convert(value, hints[name], where=f"{where} field {name}", default=defaults.get(name))
        for name, value in values.items()
    }
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)  # type: ignore[type-var]
    except (TypeError, ValueError) as exc:  # a config's own __post_init__ check (ConfigError passes through)
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"invalid {where}: {exc}") from exc


def _defaults(cls: type[Any], base: Any, names: list[str]) -> dict[str, Any]:
    """The current values of the named fields: `base`'s, or else each field's default."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in names:
            continue
        if base is not None:
            out[f.name] = getattr(base, f.name)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def _convert(value: Any, hint: Any, *, where: str, default: Any = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(value, option, where=where, default=default)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where} cannot be {value!r}")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table of {hint.__name__} fields, got {value!r}")
        base = default if isinstance(default, hint) else None
        return from_mapping(hint, value, where=where.replace(" field ", "."), base=base)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where} must be a path, got {value!r}")
        return Path(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        item = args[0] if args else Any
        items = [value_ if item is Any else _convert(value_, item, where=where) for value_ in value]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or hint is Any:
        return value
    return value


def config_as_dict(config: Any) -> dict[str, Any]:
    """A config as JSON-ready values (paths as strings), for the `training_runs` row."""
    plain: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    return plain
