"""Combining the adapters of a retraining chain into one adapter on the original base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from learning.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, combine_adapters, combined_factors, read_adapter
from reviewers.kernel.errors import TrainingError

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def test_factors_are_concatenated_with_each_scaling_folded_into_b() -> None:
    # ΔW₁ = 2·[1;0]·[1 0] = [[2,0],[0,0]]; ΔW₂ = 1·[0;3]·[0 1] = [[0,0],[0,3]]
    a1, b1 = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0], [0.0]])
    a2, b2 = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0], [3.0]])
    a, b = combined_factors([(a1, b1, 2.0), (a2, b2, 1.0)], max_rank=None)
    assert a.shape == (2, 2) and b.shape == (2, 2)
    assert torch.equal(b @ a, torch.tensor([[2.0, 0.0], [0.0, 3.0]]))


def test_a_rank_cap_keeps_the_largest_directions() -> None:
    a1, b1 = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0], [0.0]])
    a2, b2 = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0], [3.0]])
    a, b = combined_factors([(a1, b1, 2.0), (a2, b2, 1.0)], max_rank=1)
    assert a.shape == (1, 2) and b.shape == (2, 1)
    # the best rank-1 approximation of diag(2, 3) keeps the singular value 3
    assert torch.allclose(b @ a, torch.tensor([[0.0, 0.0], [0.0, 3.0]]), atol=1e-6)


def test_a_cap_above_a_layers_width_pads_with_zero_factors() -> None:
    torch.manual_seed(0)
    parts = [(torch.randn(2, 3), torch.randn(2, 2), 1.0) for _ in range(2)]  # out width 2, total rank 4
    a, b = combined_factors(parts, max_rank=3)
    assert a.shape == (3, 3) and b.shape == (2, 3)
    exact = parts[0][2] * parts[0][1] @ parts[0][0] + parts[1][2] * parts[1][1] @ parts[1][0]
    assert torch.allclose(b @ a, exact, atol=1e-5)  # rank ≤ 2 anyway: nothing is lost


def _write_adapter(path: Path, *, r: int, alpha: int, tensors: dict[str, torch.Tensor], **extra: object) -> Path:
    path.mkdir(parents=True)
    config = {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": ["q"], **extra}
    (path / ADAPTER_CONFIG).write_text(json.dumps(config))
    save_file(tensors, str(path / ADAPTER_WEIGHTS))
    return path


def test_files_are_combined_and_the_latest_full_module_wins(tmp_path: Path) -> None:
    q = "base_model.model.layer.q"
    first = _write_adapter(
        tmp_path / "one",
        r=1,
        alpha=2,
        tensors={
            f"{q}.lora_A.weight": torch.tensor([[1.0, 0.0]]),
            f"{q}.lora_B.weight": torch.tensor([[1.0], [0.0]]),
            "base_model.model.norm.weight": torch.tensor([1.0, 1.0]),
        },
        modules_to_save=["norm"],
    )
    second = _write_adapter(
        tmp_path / "two",
        r=1,
        alpha=1,
        tensors={
            f"{q}.lora_A.weight": torch.tensor([[0.0, 1.0]]),
            f"{q}.lora_B.weight": torch.tensor([[0.0], [3.0]]),
            "base_model.model.norm.weight": torch.tensor([5.0, 6.0]),
        },
        modules_to_save=["norm"],
    )
    out = combine_adapters([first, second], tmp_path / "combined")
    combined = read_adapter(out)
    assert combined.config["r"] == 2 and combined.config["lora_alpha"] == 2 and combined.scaling == 1.0
    assert combined.config["modules_to_save"] == ["norm"]
    a, b = combined.factors[q]
    assert torch.equal(b @ a, torch.tensor([[2.0, 0.0], [0.0, 3.0]]))
    assert torch.equal(combined.saved_modules["base_model.model.norm.weight"], torch.tensor([5.0, 6.0]))


def test_bad_adapters_are_refused_with_one_line(tmp_path: Path) -> None:
    q = "base_model.model.layer.q"
    ok = {f"{q}.lora_A.weight": torch.ones(1, 2), f"{q}.lora_B.weight": torch.ones(2, 1)}
    with pytest.raises(TrainingError, match="is not a LoRA adapter"):
        combine_adapters([tmp_path / "missing"], tmp_path / "o1")
    dora = _write_adapter(tmp_path / "dora", r=1, alpha=1, tensors=ok, use_dora=True)
    with pytest.raises(TrainingError, match="uses use_dora"):
        combine_adapters([dora], tmp_path / "o2")
    half = _write_adapter(tmp_path / "half", r=1, alpha=1, tensors={f"{q}.lora_A.weight": torch.ones(1, 2)})
    with pytest.raises(TrainingError, match="lacks lora_A or lora_B"):
        combine_adapters([half], tmp_path / "o3")
    other = _write_adapter(
        tmp_path / "other",
        r=1,
        alpha=1,
        tensors={
            "base_model.model.layer.k.lora_A.weight": torch.ones(1, 2),
            "base_model.model.layer.k.lora_B.weight": torch.ones(2, 1),
        },
    )
    plain = _write_adapter(tmp_path / "plain", r=1, alpha=1, tensors=ok)
    with pytest.raises(TrainingError, match="target different modules"):
        combine_adapters([plain, other], tmp_path / "o4")
    with pytest.raises(TrainingError, match="no adapters"):
        combine_adapters([], tmp_path / "o5")


def test_the_combined_adapter_equals_the_merged_chain_on_a_real_model(tmp_path: Path) -> None:
    """Stage 2 trained on base+stage 1 merged; base + combined adapter gives the same logits."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from learning.tiny_model import build_tiny_model
    from learning.training import merge_adapter

    base = build_tiny_model(tmp_path / "base", seed=0, vocab_size=300)

    def random_adapter(model_dir: Path, out: Path, seed: int) -> Path:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(str(model_dir))
        lora = LoraConfig(
            task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False
        )
        get_peft_model(model, lora).save_pretrained(str(out))
        AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(str(out))  # merging reads it there
        return out

    first = random_adapter(base, tmp_path / "a1", seed=1)
    merged = merge_adapter(base_model=base, adapter_dir=first, out_dir=tmp_path / "merged")
    second = random_adapter(merged, tmp_path / "a2", seed=2)
    chain = merge_adapter(base_model=merged, adapter_dir=second, out_dir=tmp_path / "chain")
    combined = combine_adapters([first, second], tmp_path / "combined")

    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(str(chain))(input_ids=ids).logits
        served = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(combined))
        got = served(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(str(base))(input_ids=ids).logits
    assert not torch.allclose(plain, expected, atol=1e-3), "the adapters must change the model"
    assert torch.allclose(got, expected, atol=1e-4)
