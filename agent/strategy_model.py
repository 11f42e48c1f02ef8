"""Which model writes strategies: the promoted version in the registry, picked up without a restart.

Every review asks for the current strategy model. When the registry's production version changed
since the last review, the new one is loaded: by name from an OpenAI-compatible server that serves
adapters (vLLM multi-LoRA: the adapter was loaded there under its `serving_name`), or in process
through transformers (base model + LoRA adapter). Loaded local models are cached by (base,
adapter), so a rollback to a previous version is instant too. A trained version is asked with
exactly the prompt it was trained on (`strategy_messages(s1)`), so no schema text is appended. A
version whose plans were trained and gated with the analyzers alone (`executor` `analyzer-only`) is
asked under the decisions-only schema, as the gate asked it (learning/gate.py).
Without a production version, the configured model (or none: the rule-based strategy) is used.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from agent.llm.factory import make_llm
from agent.store import models as store_models
from agent.store.db import Database
from reviewers.kernel.contracts import LLMPort
from reviewers.kernel.errors import ConfigError


@dataclass(frozen=True)
class StrategyModel:
    llm: LLMPort | None
    version_id: int | None
    name: str
    decisions_only: bool = False  # decode under the decisions-only strategy schema


@dataclass(frozen=True)
class ServingOptions:
    """How to reach models: an OpenAI-compatible server (names) or local files (paths)."""

    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    max_output_tokens: int = 512


class StrategyModelSource:
    def __init__(self, db: Database | None, options: ServingOptions, *, default: LLMPort | None = None) -> None:
        self.db = db
        self.options = options
        self.default = default
        self._cache: dict[tuple[str, str | None], LLMPort] = {}
        self._lock = threading.Lock()

    def current(self) -> StrategyModel:
        """The model in service now (looked up on every call: a promotion takes effect at the next review)."""
        version = store_models.production_version(self.db) if self.db is not None else None
        if version is None:
            name = self.default.model_name if self.default is not None else "rules"
            return StrategyModel(self.default, None, name)
        decisions_only = version["executor"] == "analyzer-only"
        return StrategyModel(self._load(version), version["id"], version["name"], decisions_only)

    def _load(self, version: store_models.ModelVersionRow) -> LLMPort:
        o = self.options
        if o.base_url:
            served = version["serving_name"] or version["name"]
            key: tuple[str, str | None] = (f"server:{served}", None)
        else:
            key = (version["base_model"], version["adapter_path"])
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            if o.base_url:
                llm = make_llm(
                    base_url=o.base_url,
                    model=key[0].removeprefix("server:"),
                    api_key=o.api_key,
                    model_path=None,
                    timeout_s=o.timeout_s,
                    max_retries=o.max_retries,
                    max_output_tokens=o.max_output_tokens,
                    schema_in_prompt=False,
                )
            else:
                llm = make_llm(
                    base_url=None,
                    model=version["name"],
                    api_key=None,
                    model_path=Path(version["base_model"]),
                    adapter_path=Path(version["adapter_path"]) if version["adapter_path"] else None,
                    timeout_s=o.timeout_s,
                    max_retries=o.max_retries,
                    max_output_tokens=o.max_output_tokens,
                    schema_in_prompt=False,
                )
            if llm is None:
                raise ConfigError(f"model version {version['name']} names no model to load")
            self._cache[key] = llm
            return llm
