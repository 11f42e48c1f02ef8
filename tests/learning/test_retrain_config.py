"""RetrainConfig: defaults with help, loading from JSON/TOML with nested trainer tables, one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from learning.retrain_config import RetrainConfig, config_as_dict, load_retrain_config
from reviewers.kernel.errors import ConfigError


def test_every_field_has_a_default_and_help() -> None:
    config = RetrainConfig()
    for f in dataclasses.fields(RetrainConfig):
        assert f.metadata.get("help"), f"{f.name} has no help"
        assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, f.name
    assert config.base_model is None and config.promote and config.max_lora_rank == 32
    assert json.dumps(config_as_dict(config))  # storable in training_runs.config


def test_a_toml_file_changes_only_what_it_names(tmp_path: Path) -> None:
    path = tmp_path / "retrain.toml"
    path.write_text(
        'base_model = "/models/base"\nmin_sft_examples = 4\nmargin = 0\nrun_rl = false\n'
        '[sft]\nmax_steps = 20\nlora_modules_to_save = ["norm"]\n'
        "[rl.strata]\nsigma = 2\nn_strategies = 2\n"
        "[reward]\nalpha = 2\n"
    )
    config = load_retrain_config(path, work_dir=tmp_path / "w")
    assert config.base_model == Path("/models/base") and config.work_dir == tmp_path / "w"
    assert config.min_sft_examples == 4 and config.margin == 0.0 and config.run_rl is False
    assert config.sft.max_steps == 20 and config.sft.lora_modules_to_save == ["norm"]
    assert config.sft.learning_rate == RetrainConfig().sft.learning_rate  # untouched fields keep defaults
    assert config.rl.strata.sigma == 2 and config.rl.strata.n_strategies == 2 and config.reward.alpha == 2.0
    assert config.dpo == RetrainConfig().dpo


def test_rl_samples_as_the_candidate_is_served_and_a_table_keeps_that(tmp_path: Path) -> None:
    """A retrain's candidate is analyzer-only, asked under the decisions-only schema; RL samples its
    plans the same way by default, and a `[rl.train]` table that names other fields keeps it (a
    nested table overrides only what it names, not the whole section)."""
    train = RetrainConfig().rl.train
    assert train.constrained_decoding and train.decisions_only
    path = tmp_path / "retrain.toml"
    path.write_text("[rl.train]\nmrs_per_step = 3\n")
    train = load_retrain_config(path).rl.train
    assert train.mrs_per_step == 3 and train.constrained_decoding and train.decisions_only
    path.write_text('[rl.train]\ngeneration_backend = "vllm"\n')
    with pytest.raises(ConfigError, match="constrained_decoding needs generation_backend 'transformers'"):
        load_retrain_config(path)
    path.write_text('[rl.train]\ngeneration_backend = "vllm"\nconstrained_decoding = false\n')
    assert load_retrain_config(path).rl.train.generation_backend == "vllm"


def test_json_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "retrain.json"
    path.write_text(json.dumps({"work_dir": "/data/retrain", "dpo": {"beta": 0.2}}))
    config = load_retrain_config(path, work_dir=None, base_model=tmp_path)
    assert config.work_dir == Path("/data/retrain") and config.base_model == tmp_path and config.dpo.beta == 0.2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("min_sft_exampels = 3\n", "unknown retrain config field\\(s\\): min_sft_exampels"),
        ("[sft]\nmax_stpes = 3\n", "unknown retrain config.sft field\\(s\\): max_stpes"),
        ('min_sft_examples = "many"\n', "min_sft_examples must be an integer"),
        ("run_rl = 1\n", "run_rl must be true or false"),
        ('[sft]\ndevice = "tpu"\n', "device must be one of auto, cpu, cuda"),
        ("sft = 3\n", "sft must be a table of SFTTrainingConfig fields"),
        ("min_eval_cases = 0\n", "min_eval_cases=0 \\(must be >= 1\\)"),
        ("eval_fraction = 1.0\n", "eval_fraction=1.0"),
        ("[rl.strata]\nn_strategies = 1\n", "invalid StraTA config"),
        ("not toml [", "is not valid toml"),
    ],
)
def test_bad_files_are_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "retrain.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_retrain_config(path)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read retrain config"):
        load_retrain_config(tmp_path / "nope.toml")
