"""The tiny model builds offline, loads with the Auto classes, and serves the transformers backend."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Literal

import pytest
import torch
from devices import TEST_DEVICE
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from agent.llm.factory import make_llm
from agent.llm.transformers_local import PEFT_CHECKPOINTING_WARNING, TransformersLLM
from learning.tiny_model import IM_END, IM_START, build_tiny_model
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import ConfigError, LLMError, LLMOutputError, TrainingError

MESSAGES: list[ChatMessage] = [
    {"role": "system", "content": "You plan code reviews."},
    {"role": "user", "content": 'Changed: api/routes.py (+12 -3). Plan as {"change_type": ...}.'},
]


class Verdict(BaseModel):
    verdict: Literal["REAL", "FALSE_POSITIVE"]
    reason: str


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


def test_build_is_fast_seeded_and_loads_offline(tmp_path: Path, tiny: Path) -> None:
    started = time.monotonic()
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert time.monotonic() - started < 60.0  # ~1 s alone; generous so a loaded machine cannot fail it (issue 21)
    other = build_tiny_model(tmp_path / "other", seed=1, corpus=["def extra(): pass"])
    same = AutoModelForCausalLM.from_pretrained(again).state_dict()
    first = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    different = AutoModelForCausalLM.from_pretrained(other).state_dict()
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not all(torch.equal(first[k], different[k]) for k in first if first[k].shape == different[k].shape)
    assert (tiny / "tokenizer.json").read_text() == (again / "tokenizer.json").read_text()

    tokenizer: Any = AutoTokenizer.from_pretrained(tiny)
    assert len(tokenizer) == 512
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token != tokenizer.eos_token
    text = "def f(x):\n    return {'a': x}  # ünïcode"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: lossless


def test_chat_template_and_generation(tiny: Path) -> None:
    tokenizer: Any = AutoTokenizer.from_pretrained(tiny)
    model: Any = AutoModelForCausalLM.from_pretrained(tiny)
    rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        f"{IM_START}system\nYou plan code reviews.{IM_END}\n"
        f"{IM_START}user\n{MESSAGES[1]['content']}{IM_END}\n"
        f"{IM_START}assistant\n"
    )
    conversation = [*MESSAGES, {"role": "assistant", "content": "ok"}]
    masked = tokenizer.apply_chat_template(conversation, return_dict=True, return_assistant_tokens_mask=True)
    assert sum(masked["assistant_masks"]) == len(tokenizer("ok" + IM_END)["input_ids"])
    encoded = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**encoded, max_new_tokens=5, do_sample=False)
    assert output.shape[1] <= encoded["input_ids"].shape[1] + 5
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 2


def test_bad_sizes_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="hidden_size"):
        build_tiny_model(tmp_path, hidden_size=6)
    with pytest.raises(TrainingError, match="vocab_size"):
        build_tiny_model(tmp_path, vocab_size=100)


def _tracked(tiny: Path, **options: object) -> tuple[TransformersLLM, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    llm = TransformersLLM(tiny, device=TEST_DEVICE, tracer=provider.get_tracer("test"), **options)  # type: ignore[arg-type]
    return llm, exporter


def test_transformers_backend_completes_text_with_spans(tiny: Path) -> None:
    llm, exporter = _tracked(tiny, max_output_tokens=8)
    text = llm.complete_text(MESSAGES, purpose="summary", max_tokens=6)
    assert isinstance(text, str)
    assert llm.complete_text(MESSAGES, purpose="summary", max_tokens=6) == text  # greedy: deterministic
    span = exporter.get_finished_spans()[0]
    attrs = dict(span.attributes or {})
    prompt = llm.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True)
    assert span.name == f"chat {tiny.name}"
    assert attrs["gen_ai.provider.name"] == "transformers"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == tiny.name
    assert attrs["gen_ai.usage.input_tokens"] == len(prompt["input_ids"])
    assert 0 < int(attrs["gen_ai.usage.output_tokens"]) <= 6  # type: ignore[arg-type]
    assert attrs["gen_ai.request.max_tokens"] == 6
    assert attrs["reviewloop.purpose"] == "summary"


def test_a_random_models_cut_off_answer_fails_at_once(tiny: Path) -> None:
    """An answer `max_tokens` cut short fails typed after one call: asking again the same way would only
    cut it short again (the retry that carries the validation error is for answers that ended)."""
    llm, exporter = _tracked(tiny, max_output_tokens=12)
    with pytest.raises(LLMOutputError, match=r"Verdict was cut off at max_tokens \(12\)"):
        llm.complete_json(MESSAGES, Verdict, purpose="verify")
    spans = exporter.get_finished_spans()
    assert [dict(s.attributes or {})["reviewloop.attempt"] for s in spans] == [1]
    assert [dict(s.attributes or {})["gen_ai.response.finish_reasons"] for s in spans] == [("length",)]


def test_sampling_is_seeded_and_returns_n(tiny: Path) -> None:
    llm, _ = _tracked(tiny, seed=3)
    first = llm.sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=6)
    assert len(first) == 3
    assert llm.sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=6) == first
    with pytest.raises(LLMError):
        llm.sample_texts(MESSAGES, n=2, temperature=0.0, max_tokens=6)


def test_prompt_over_the_context_is_refused(tiny: Path) -> None:
    llm, _ = _tracked(tiny, max_output_tokens=8)
    huge: list[ChatMessage] = [{"role": "user", "content": "word " * 5000}]
    with pytest.raises(LLMError, match="exceeds the model's context"):
        llm.complete_text(huge, purpose="summary")


def test_factory_builds_the_local_backend_or_refuses_a_missing_path(tiny: Path, tmp_path: Path) -> None:
    llm = make_llm(
        base_url=None, model=None, api_key=None, model_path=tiny, timeout_s=1, max_retries=0, max_output_tokens=4
    )
    assert isinstance(llm, TransformersLLM)
    with pytest.raises(ConfigError, match="no model at"):
        make_llm(
            base_url=None,
            model=None,
            api_key=None,
            model_path=tmp_path / "missing",
            timeout_s=1,
            max_retries=0,
            max_output_tokens=4,
        )


def test_cli_builds_a_tiny_model(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from api.cli import app

    out = tmp_path / "cli-model"
    result = CliRunner().invoke(app, ["dev", "tiny-model", str(out), "--vocab-size", "300", "--seed", "5"])
    assert result.exit_code == 0, result.output
    assert AutoTokenizer.from_pretrained(out).vocab_size == 300
    refused = CliRunner().invoke(app, ["dev", "tiny-model", str(tmp_path / "bad"), "--layers", "0"])
    assert refused.exit_code == 2
    assert "layers must be at least 1" in refused.output


def test_concurrent_calls_are_serialised_and_match_sequential(tiny: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    llm, exporter = _tracked(tiny, max_output_tokens=6)
    prompts: list[list[ChatMessage]] = [[{"role": "user", "content": f"review file number {i}"}] for i in range(4)]
    sequential = [llm.complete_text(p, purpose="summary") for p in prompts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda p: llm.complete_text(p, purpose="summary"), prompts))
    assert concurrent == sequential
    assert len(exporter.get_finished_spans()) == 8


def test_lora_adapter_is_applied(tiny: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    base: Any = AutoModelForCausalLM.from_pretrained(tiny)
    # Random B matrices (not peft's zero init) so the adapter visibly changes the logits.
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PEFT_CHECKPOINTING_WARNING, category=FutureWarning)
        peft_model = get_peft_model(base, config)
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    plain, _ = _tracked(tiny)
    adapted, _ = _tracked(tiny, adapter_path=tmp_path / "adapter")
    assert adapted.model_name == f"{tiny.name}+adapter"
    ids = plain.tokenizer("def f(): pass", return_tensors="pt")["input_ids"].to(plain.model.device)
    with torch.no_grad():
        assert not torch.allclose(plain.model(ids).logits, adapted.model(ids).logits)
    assert isinstance(adapted.complete_text(MESSAGES, purpose="summary", max_tokens=4), str)
    with pytest.raises(ConfigError, match="no LoRA adapter"):
        TransformersLLM(tiny, adapter_path=tmp_path / "nothing")
