"""Loading a promoted LoRA adapter into a running vLLM server, so it serves without a restart.

vLLM (started with `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) adds an adapter at
runtime through `POST /v1/load_lora_adapter {"lora_name", "lora_path"}`; requests then name the
adapter as their `model`. The path is read by the vLLM server, so it must be valid there (deploy/
mounts the models volume at the same path in the retrain and vLLM containers). Without the
environment flag the endpoint does not exist (FastAPI's plain 404): the error says so; an adapter path
vLLM cannot read is its own 404 with a message, passed on. An adapter already loaded
under the same name counts as loaded (vLLM answers 400 "has already been loaded"): a retried
promotion must not fail on its own earlier success.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from reviewers.kernel.errors import LLMUnavailableError, ReviewloopError

LOAD_TIMEOUT_S = 300.0  # loading reads the adapter from disk and may wait for running requests
ALREADY_LOADED = "already been loaded"


@dataclass(frozen=True)
class VllmServer:
    """Where a promoted adapter is hot-loaded: an OpenAI-compatible vLLM server with runtime LoRA."""

    base_url: str
    api_key: str | None = None


class AdapterLoadError(ReviewloopError):
    """The model server refused the adapter (bad path, rank above --max-lora-rank, LoRA not enabled)."""


def lora_endpoint(base_url: str, action: str = "load_lora_adapter") -> str:
    """`…/v1/<action>` for an OpenAI-compatible base URL given with or without its `/v1`."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return f"{base}/{action}"


def load_lora_adapter(
    *,
    base_url: str,
    lora_name: str,
    lora_path: Path,
    api_key: str | None,
    timeout_s: float = LOAD_TIMEOUT_S,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """Ask the vLLM server at `base_url` to serve `lora_path` under `lora_name`."""
    url = lora_endpoint(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            response = client.post(url, json={"lora_name": lora_name, "lora_path": str(lora_path)}, headers=headers)
    except httpx.HTTPError as exc:
        raise LLMUnavailableError(f"cannot reach the model server at {url}: {exc}") from exc
    if response.status_code == 200:
        return
    detail = _detail(response)
    if response.status_code == 400 and ALREADY_LOADED in detail:
        return
    if response.status_code == 404 and detail in ("Not Found", ""):  # FastAPI's own 404: no such route
        raise AdapterLoadError(
            f"the model server at {url} has no runtime LoRA loading (404); start vLLM with --enable-lora and"
            " VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
        )
    if response.status_code in (401, 403):
        raise AdapterLoadError(f"the model server at {url} refused the API key ({response.status_code})")
    if response.status_code >= 500:
        raise LLMUnavailableError(f"the model server at {url} failed to load {lora_name}: {detail}")
    raise AdapterLoadError(f"the model server at {url} refused adapter {lora_name} ({response.status_code}): {detail}")


def _detail(response: httpx.Response) -> str:
    """The server's error message, one line (vLLM answers JSON {"error": {"message"}} or plain text)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip().splitlines()[0][:300] if response.text.strip() else ""
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        message = error.get("message") if isinstance(error, dict) else error
        return str(message or body)[:300]
    return str(body)[:300]
