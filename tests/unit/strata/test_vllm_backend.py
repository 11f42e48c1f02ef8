"""The vLLM backend's CPU-checkable parts: the clear error without vLLM, and TRL's weight names."""

from __future__ import annotations

from pathlib import Path

import pytest

from learning.replay import ReplayEnvConfig
from learning.strata.config import StrataConfig
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.strata.run_config import RLTrainConfig
from learning.strata.synthetic import SyntheticConfig, generate_replay_set
from learning.strata.trainer import StrataTrainer
from learning.strata.vllm_backend import VLLMConfig, require_vllm, vllm_available, vllm_parameter_names
from learning.tiny_model import build_tiny_model
from reviewers.kernel.errors import ConfigError, TrainingError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


def test_weight_names_are_the_checkpoints_names(tiny: Path) -> None:
    plain = StrategyPolicy.load(tiny, config=PolicyConfig(use_lora=False, device="cpu"))
    lora = StrategyPolicy.load(tiny, config=PolicyConfig(use_lora=True, device="cpu", lora_r=4))
    expected = {n for n, _ in plain.model.named_parameters()}
    assert {n for n, _ in vllm_parameter_names(plain.model)} == expected
    # under peft: no adapter tensors, and the base layers under the names vLLM loads from a checkpoint
    assert {n for n, _ in vllm_parameter_names(lora.model)} == expected


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed here")
def test_without_vllm_one_clear_error(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match=r"needs vLLM: install the gpu extra"):
        require_vllm()
    trainer = StrataTrainer(
        StrataConfig(sigma=1, n_strategies=2, max_steps=1, embedder="hashing", max_new_tokens=8),
        base_model=tiny,
        train_cases=generate_replay_set(SyntheticConfig(n_train=2, n_eval=1)),
        out_dir=tmp_path / "rl",
        train_config=RLTrainConfig(generation_backend="vllm", mrs_per_step=1),
        policy_config=PolicyConfig(use_lora=False, device="cpu"),
        env_config=ReplayEnvConfig(step_budget_cap=1),
    )
    with pytest.raises(TrainingError, match="needs vLLM"):
        trainer.train()


def test_config_checks() -> None:
    with pytest.raises(ConfigError):
        VLLMConfig(gpu_memory_utilization=0)
    with pytest.raises(ConfigError):
        VLLMConfig(weight_sync="push")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="generation_backend"):
        RLTrainConfig(generation_backend="tgi")  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match="not supported by this trainer yet"):
        StrataTrainer(
            StrataConfig(fixed_executor=False),
            base_model=Path("unused"),
            train_cases=generate_replay_set(SyntheticConfig(n_train=1, n_eval=1)),
            out_dir=Path("unused"),
        )
