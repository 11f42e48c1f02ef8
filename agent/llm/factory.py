"""Which model backend a configuration asks for: HTTP, a local model directory, or none.

An OpenAI-compatible server wins when both a URL and a local path are set (production serves
through vLLM; the local path is then only for training). No model is `None`, not a null object:
every caller already has a rule-based path for "no model", and `None` makes it impossible to forget.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from agent.llm.port import SamplingLLM
from agent.service_settings import Settings
from reviewers.kernel.errors import ConfigError


def make_llm(
    *,
    base_url: str | None,
    model: str | None,
    api_key: str | SecretStr | None,
    model_path: Path | None,
    adapter_path: Path | None = None,
    timeout_s: float,
    max_retries: int,
    max_output_tokens: int,
    schema_in_prompt: bool = True,
    context_tokens: int | None = None,
    cpu_threads: int | None = None,
) -> SamplingLLM | None:
    """The configured backend, or None when no model is configured.

    `schema_in_prompt=False` sends the messages exactly as given: a model fine-tuned on a prompt
    (the strategy model) must see that prompt at serving time, not one with an appended schema.
    `context_tokens` is the model's context length when the server does not report it (vLLM does,
    as `max_model_len` in its model list; a local model's config says it).
    `cpu_threads` applies to the in-process backend only (torch's threads, process-wide).
    """
    if base_url:
        if not model:
            raise ConfigError("an LLM base URL is set but no model name (REVIEWLOOP_LLM_MODEL)")
        from agent.llm.openai_http import OpenAICompatibleLLM

        key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        return OpenAICompatibleLLM(
            base_url=base_url,
            model=model,
            api_key=key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            max_output_tokens=max_output_tokens,
            schema_in_prompt=schema_in_prompt,
            context_tokens=context_tokens,
        )
    if model_path is not None:
        from agent.llm.transformers_local import TransformersLLM

        return TransformersLLM(
            Path(model_path),
            adapter_path=adapter_path,
            max_output_tokens=max_output_tokens,
            model_name=model or None,
            schema_in_prompt=schema_in_prompt,
            cpu_threads=cpu_threads,
        )
    if model:
        raise ConfigError("an LLM model name is set but neither a base URL nor a local model path")
    return None


def llm_from_settings(settings: Settings, *, adapter_path: Path | None = None) -> SamplingLLM | None:
    """`make_llm` with the values of `Settings` (for the entry points: CLI, worker)."""
    return make_llm(
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=settings.llm_api_key,
        model_path=settings.llm_model_path,
        adapter_path=adapter_path,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        max_output_tokens=settings.llm_max_output_tokens,
        context_tokens=settings.llm_context_tokens,
        cpu_threads=settings.llm_cpu_threads,
    )
