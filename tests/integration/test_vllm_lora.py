"""Hot-loading a promoted adapter into vLLM over real HTTP (loopback), with vLLM's answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.vllm_lora_server import FakeVllmLora

from learning.vllm_lora import AdapterLoadError, load_lora_adapter, lora_endpoint
from reviewers.kernel.errors import LLMUnavailableError


@pytest.fixture
def vllm() -> Iterator[FakeVllmLora]:
    server = FakeVllmLora().start()
    yield server
    server.stop()


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    return tmp_path / "adapter"


def test_endpoint_with_or_without_v1() -> None:
    assert lora_endpoint("http://vllm:8000/v1") == "http://vllm:8000/v1/load_lora_adapter"
    assert lora_endpoint("http://vllm:8000/v1/") == "http://vllm:8000/v1/load_lora_adapter"
    assert lora_endpoint("http://vllm:8000") == "http://vllm:8000/v1/load_lora_adapter"


def test_the_adapter_is_loaded_with_the_key_and_a_repeat_is_fine(vllm: FakeVllmLora, adapter: Path) -> None:
    load_lora_adapter(base_url=vllm.base_url, lora_name="strategy-v3", lora_path=adapter, api_key="sk-vllm")
    assert vllm.loaded == {"strategy-v3": str(adapter)}
    [request] = vllm.requests
    assert request["body"] == {"lora_name": "strategy-v3", "lora_path": str(adapter)}
    assert request["headers"]["Authorization"] == "Bearer sk-vllm"
    # a retried promotion finds it loaded: vLLM's 400 "already been loaded" is success
    load_lora_adapter(base_url=vllm.base_url, lora_name="strategy-v3", lora_path=adapter, api_key="sk-vllm")
    assert len(vllm.requests) == 2


def test_refusals_are_one_clear_line(vllm: FakeVllmLora, adapter: Path, tmp_path: Path) -> None:
    with pytest.raises(AdapterLoadError, match="refused the API key"):
        load_lora_adapter(base_url=vllm.base_url, lora_name="a", lora_path=adapter, api_key="wrong")
    with pytest.raises(AdapterLoadError, match="No adapter found"):
        load_lora_adapter(base_url=vllm.base_url, lora_name="b", lora_path=tmp_path / "nothing", api_key="sk-vllm")
    vllm.runtime_updates = False
    with pytest.raises(AdapterLoadError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        load_lora_adapter(base_url=vllm.base_url, lora_name="c", lora_path=adapter, api_key="sk-vllm")
    assert vllm.loaded == {}


def test_an_unreachable_server_is_retryable(adapter: Path) -> None:
    server = FakeVllmLora().start()
    url = server.base_url
    server.stop()
    with pytest.raises(LLMUnavailableError, match="cannot reach the model server") as caught:
        load_lora_adapter(base_url=url, lora_name="a", lora_path=adapter, api_key=None, timeout_s=2)
    assert caught.value.retryable
