"""StrataConfig defaults follow the StraTA paper; each ablation switches exactly one mechanism off."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from learning.strata.config import StrataConfig
from reviewers.kernel.errors import ConfigError


def test_defaults_are_the_papers() -> None:
    c = StrataConfig()
    assert (c.sigma, c.n_strategies, c.m_executions) == (8, 4, 4)
    assert (c.delta, c.kappa, c.eps_low, c.eps_high, c.keep_ratio) == (0.5, 0.1, 0.2, 0.28, 0.75)
    assert c.fixed_executor and c.embedder == "minilm" and c.judge == "rule"
    assert c.n_candidates == 32


def test_every_field_has_a_help_string() -> None:
    for f in dataclasses.fields(StrataConfig):
        assert f.metadata.get("help"), f.name


def test_ablations_change_one_field_each() -> None:
    full = StrataConfig()
    changed = {
        "no_fps": ("sigma", 1),
        "no_judge": ("kappa", 0.0),
        "plain_mean": ("delta", 1.0),
        "no_filter": ("keep_ratio", 1.0),
    }
    for name, (field_name, value) in changed.items():
        preset = StrataConfig.ablation(name)  # type: ignore[arg-type]
        assert getattr(preset, field_name) == value
        assert dataclasses.replace(preset, **{field_name: getattr(full, field_name)}) == full
    assert StrataConfig.ablation("full") == full
    assert StrataConfig.no_fps().n_candidates == 4


def test_ablations_compose_on_a_base() -> None:
    both = StrataConfig.no_judge(StrataConfig.no_fps(StrataConfig(n_strategies=2)))
    assert (both.sigma, both.kappa, both.n_strategies) == (1, 0.0, 2)


def test_sub_configs_carry_the_values() -> None:
    c = StrataConfig(embedder="hashing", judge="model", kappa=0.2, eps_high=0.3)
    assert c.embedder_config().kind == "hashing"
    assert (c.judge_config().kind, c.judge_config().kappa) == ("model", 0.2)
    assert c.loss_config().eps_high == 0.3


@pytest.mark.parametrize(
    "bad",
    [
        {"sigma": 0},
        {"n_strategies": 1},
        {"m_executions": 0},
        {"delta": 0.0},
        {"delta": 1.2},
        {"kappa": -0.1},
        {"eps_low": 1.0},
        {"keep_ratio": 0.0},
        {"learning_rate": 0.0},
        {"temperature": 0.0},
    ],
)
def test_invalid_values_are_one_config_error(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="invalid StraTA config"):
        StrataConfig(**bad)  # type: ignore[arg-type]


def test_unknown_ablation() -> None:
    with pytest.raises(ConfigError, match="unknown ablation"):
        StrataConfig.ablation("no_everything")  # type: ignore[arg-type]


def test_the_config_and_pure_modules_load_without_torch() -> None:
    # the CLI (api/) builds its options from StrataConfig and must not pull torch in at import time
    code = (
        "import sys\n"
        "import learning.strata.config, agent.diversity, learning.strata.advantages\n"
        "import learning.strata.masking, learning.strata.judge, agent.embeddings\n"
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
