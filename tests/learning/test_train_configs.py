"""Training configs: every field documented, files loaded with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from learning.datasets import DatasetConfig
from learning.feedback_labels import FeedbackRewardConfig
from learning.train_configs import (
    DPOTrainingConfig,
    KTOTrainingConfig,
    SFTTrainingConfig,
    config_help,
    load_config,
)
from reviewers.kernel.errors import ConfigError


@pytest.mark.parametrize(
    "cls", [SFTTrainingConfig, DPOTrainingConfig, KTOTrainingConfig, FeedbackRewardConfig, DatasetConfig]
)
def test_every_field_has_a_default_and_help(cls: type) -> None:
    from dataclasses import MISSING, fields

    for f in fields(cls):
        assert f.default is not MISSING or f.default_factory is not MISSING, f.name
        assert f.metadata.get("help"), f.name
    if cls in (SFTTrainingConfig, DPOTrainingConfig, KTOTrainingConfig):
        assert all(text for _, text in config_help(cls).values())


def test_load_json_and_toml(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text('{"learning_rate": 1, "use_lora": false, "lora_target_modules": ["q_proj"]}')
    config = load_config(SFTTrainingConfig, tmp_path / "c.json", max_steps=5)
    assert config.learning_rate == 1 and not config.use_lora and config.max_steps == 5
    assert config.lora_target_modules == ["q_proj"]
    (tmp_path / "c.toml").write_text('beta = 0.3\ndevice = "cpu"\n')
    dpo = load_config(DPOTrainingConfig, tmp_path / "c.toml")
    assert dpo.beta == 0.3 and dpo.device == "cpu" and dpo.learning_rate == 5e-6
    assert load_config(KTOTrainingConfig, None) == KTOTrainingConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"learning_rat": 1}', "unknown SFTTrainingConfig field"),
        ('{"max_steps": "ten"}', "max_steps must be int"),
        ('{"use_lora": 1}', "use_lora must be bool"),
        ('{"max_steps": true}', "max_steps must be int"),
        ('{"device": "tpu"}', "device must be one of auto, cpu, cuda"),
        ("[1, 2]", "must be a table"),
        ("{", "is not valid json"),
    ],
)
def test_bad_files_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(SFTTrainingConfig, path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read training config"):
        load_config(SFTTrainingConfig, tmp_path / "none.json")
