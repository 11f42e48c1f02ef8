"""Wiring for entry points: settings in, a ready store, tracer and model out.

Only entry points (the CLI, the API app, the worker) call this; library code takes the pieces it
builds as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace import TracerProvider

from agent.llm.factory import llm_from_settings
from agent.service_settings import Settings
from agent.store import db, migrate
from agent.strategy_model import ServingOptions, StrategyModelSource
from agent.tracing import setup_tracing
from reviewers.kernel.contracts import LLMPort


@dataclass
class Session:
    dsn: str
    pool: db.Pool
    provider: TracerProvider | None

    def close(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()
            self.provider.shutdown()
        self.pool.close()


def prepare_database(dsn: str) -> None:
    """Our migrations plus LangGraph's checkpoint tables (idempotent)."""
    from agent.pipeline import setup_checkpointer

    migrate.upgrade(dsn)
    setup_checkpointer(dsn)


def open_session(settings: Settings, *, tracing: bool = True, otlp_endpoint: str | None = None) -> Session:
    dsn = db.resolve_dsn(database_url=settings.database_url, data_dir=settings.data_dir)
    prepare_database(dsn)
    pool = db.open_pool(dsn, max_size=settings.db_pool_size)
    endpoint = otlp_endpoint or settings.otlp_endpoint
    provider = setup_tracing(pool=pool, otlp_endpoint=endpoint) if tracing else None
    return Session(dsn=dsn, pool=pool, provider=provider)


def strategy_model_source(settings: Settings, pool: db.Pool, default: LLMPort | None) -> StrategyModelSource:
    """The registry-backed strategy model, reached the way the configured model is reached."""
    return StrategyModelSource(
        pool,
        ServingOptions(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            max_output_tokens=settings.llm_max_output_tokens,
        ),
        default=default,
    )


__all__ = ["Session", "llm_from_settings", "open_session", "prepare_database", "strategy_model_source"]
