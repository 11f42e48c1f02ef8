"""One LoRA adapter out of the adapters a retraining chain produced, for the base model in service.

Retraining runs stages one after another (SFT, then DPO or KTO, then RL); each stage trains a fresh
LoRA adapter on the previous stages folded into the base. The model server, though, serves the
*original* base model (vLLM loads an adapter for it at runtime), so the candidate must be one
adapter on that base. LoRA updates add up on the same linear layers,

    W' = W + s₁·B₁A₁ + s₂·B₂A₂ + …          (sᵢ = alphaᵢ / rᵢ)

so the stages' adapters are exactly one adapter of rank Σrᵢ: A = [A₁; A₂; …], B = [s₁B₁, s₂B₂, …]
with scaling 1. When that rank exceeds what the server accepts (vLLM's `--max-lora-rank`), the sum
is cut to the best approximation of that rank (truncated SVD, computed through QR factors of B and
Aᵀ, so no full weight-sized matrix is ever formed). Modules trained in full beside an adapter
(`modules_to_save`) are taken from the latest adapter that saved them: each stage started from the
previous stages' values, so the latest holds the sum of all of them.

Pure tensor work on the saved files: no model is loaded.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reviewers.kernel.errors import TrainingError

if TYPE_CHECKING:
    import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[AB])\.weight$")
# Options under which ΔW is not s·B·A; combining them would silently change the model.
UNSUPPORTED_OPTIONS = ("use_dora", "use_rslora", "rank_pattern", "alpha_pattern", "fan_in_fan_out")
# Tokenizer files copied from the latest adapter, so the combined directory loads like a trained one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass(frozen=True)
class LoraAdapter:
    """One saved adapter: its config, its LoRA factors per module and its fully trained modules."""

    path: Path
    config: dict[str, Any]
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]  # module → (A: r×in, B: out×r)
    saved_modules: dict[str, torch.Tensor]  # full weights of `modules_to_save`, by key

    @property
    def scaling(self) -> float:
        return float(self.config["lora_alpha"]) / float(self.config["r"])


def read_adapter(path: Path) -> LoraAdapter:
    """A peft LoRA adapter directory; anything that is not a plain LoRA adapter is a TrainingError."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        config = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        tensors = load_file(str(path / ADAPTER_WEIGHTS))
    except FileNotFoundError as exc:
        raise TrainingError(f"{path} is not a LoRA adapter ({Path(exc.filename or '').name} is missing)") from exc
    except (OSError, ValueError) as exc:
        raise TrainingError(f"the adapter in {path} is corrupt: {str(exc).splitlines()[0]}") from exc
    if config.get("peft_type") != "LORA":
        raise TrainingError(f"the adapter in {path} is {config.get('peft_type')}, not LORA")
    used = [name for name in UNSUPPORTED_OPTIONS if config.get(name)]
    if used:
        raise TrainingError(f"the adapter in {path} uses {', '.join(used)}; only plain LoRA adapters can be combined")
    parts: dict[str, dict[str, torch.Tensor]] = {}
    saved: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        match = LORA_KEY.match(key)
        if match is None:
            saved[key] = tensor
        else:
            parts.setdefault(match["module"], {})[match["part"]] = tensor
    incomplete = sorted(m for m, p in parts.items() if set(p) != {"A", "B"})
    if incomplete:
        raise TrainingError(f"the adapter in {path} lacks lora_A or lora_B for {incomplete[0]}")
    return LoraAdapter(path, config, {m: (p["A"], p["B"]) for m, p in parts.items()}, saved)


def combined_factors(
    adapters: Sequence[tuple[torch.Tensor, torch.Tensor, float]], *, max_rank: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) with B·A = Σ sᵢ·Bᵢ·Aᵢ, of rank Σrᵢ, or its best rank-`max_rank` approximation."""
    import torch

    a = torch.cat([ai.float() for ai, _, _ in adapters], dim=0)
    b = torch.cat([bi.float() * s for _, bi, s in adapters], dim=1)
    rank = a.shape[0]
    if max_rank is None or rank <= max_rank:
        return a, b
    # B·A = Qb·Rb·(Qa·Ra)ᵀ = Qb·(Rb·Raᵀ)·Qaᵀ; the SVD of the small middle factor gives that of B·A.
    qb, rb = torch.linalg.qr(b)
    qa, ra = torch.linalg.qr(a.T)
    u, sigma, vh = torch.linalg.svd(rb @ ra.T, full_matrices=False)
    root = sigma[:max_rank].sqrt()
    new_b = (qb @ u[:, :max_rank]) * root
    new_a = root[:, None] * (vh[:max_rank] @ qa.T)
    short = max_rank - new_a.shape[0]
    if short > 0:  # a layer narrower than max_rank: zero factors keep every module at one rank
        new_a = torch.cat([new_a, new_a.new_zeros(short, new_a.shape[1])], dim=0)
        new_b = torch.cat([new_b, new_b.new_zeros(new_b.shape[0], short)], dim=1)
    return new_a.contiguous(), new_b.contiguous()


def combine_adapters(adapter_dirs: Sequence[Path], out_dir: Path, *, max_rank: int | None = None) -> Path:
    """Write one adapter into `out_dir` equal to applying `adapter_dirs` in order (see the module doc).

    A single adapter is copied as it is (when its rank fits). Every adapter must target the same
    modules: stages of one retraining use one LoRA configuration.
    """
    from safetensors.torch import save_file

    if not adapter_dirs:
        raise TrainingError("no adapters to combine")
    if max_rank is not None and max_rank < 1:
        raise TrainingError(f"max_rank must be at least 1, got {max_rank}")
    adapters = [read_adapter(p) for p in adapter_dirs]
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise TrainingError(f"output directory {out} is not empty; choose a new one")
    modules = set(adapters[0].factors)
    for adapter in adapters[1:]:
        if set(adapter.factors) != modules:
            raise TrainingError(f"the adapters in {adapters[0].path} and {adapter.path} target different modules")
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    ranks: set[int] = set()
    for module in sorted(modules):
        a, b = combined_factors(
            [(ad.factors[module][0], ad.factors[module][1], ad.scaling) for ad in adapters], max_rank=max_rank
        )
        dtype = adapters[-1].factors[module][0].dtype
        tensors[f"{module}.lora_A.weight"] = a.to(dtype)
        tensors[f"{module}.lora_B.weight"] = b.to(dtype)
        ranks.add(a.shape[0])
    for adapter in adapters:  # later adapters overwrite: the latest full copy of a module wins
        tensors.update(adapter.saved_modules)
    [rank] = ranks  # every module has the same factors count, so the same rank
    config = dict(adapters[-1].config)
    saved_names = [name for ad in adapters for name in ad.config.get("modules_to_save") or []]
    # scaling 1: every stage's own scaling is already folded into B
    config.update(
        r=rank,
        lora_alpha=rank,
        modules_to_save=sorted(set(saved_names)) or None,
        base_model_name_or_path=adapters[0].config.get("base_model_name_or_path"),
    )
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    for name in TOKENIZER_FILES:
        source = adapters[-1].path / name
        if source.is_file():
            shutil.copyfile(source, out / name)
    return out


def adapter_rank(path: Path) -> int:
    """The rank an adapter declares (what vLLM checks against `--max-lora-rank`)."""
    try:
        config: Mapping[str, Any] = json.loads((Path(path) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainingError(f"{path} is not a readable LoRA adapter: {exc}") from exc
    return int(config["r"])
