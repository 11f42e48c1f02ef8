"""Every setting of reviewloop, in one pydantic-settings class (env prefix `REVIEWLOOP_`).

Library code receives values from this object as arguments; only the entry points (CLI, API app,
worker) construct it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from platformdirs import user_data_dir
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "token", "xxx", ""})
# The shortest webhook secret production accepts. A hook secret is a shared password checked on every
# delivery from anywhere that reaches the service, with no lockout: 16 random URL-safe base64
# characters (~6 bits each) are ~96 bits, out of reach of guessing over the network; GitLab's own
# tokens are longer.
MIN_SECRET_CHARS = 16


def default_data_dir() -> Path:
    return Path(user_data_dir("reviewloop", appauthor=False))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REVIEWLOOP_", extra="ignore")

    environment: Literal["development", "production"] = "development"
    database_url: str | None = Field(default=None, description="Postgres DSN; absent = embedded server")
    data_dir: Path = Field(default_factory=default_data_dir)
    db_pool_size: int = 10

    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model_path: Path | None = Field(default=None, description="local model for the transformers backend")
    llm_timeout_s: float = 60.0
    llm_max_retries: int = 2
    llm_max_output_tokens: int = 1024
    llm_context_tokens: int | None = Field(
        default=None,
        description="the model's context length in tokens; default: the server's max_model_len (vLLM), else learned",
    )
    llm_cpu_threads: int | None = Field(
        default=None,
        ge=1,
        description="torch threads for the in-process model (None: one per core); 1 is fastest on a shared machine",
    )

    gitlab_url: str | None = None
    gitlab_token: SecretStr | None = None
    gitlab_bot_user_id: int | None = Field(default=None, description="bot user id: its notes are ignored")
    gitlab_bot_username: str | None = Field(default=None, description="bot username (same purpose)")
    webhook_secret: SecretStr | None = None
    project_secrets: dict[str, SecretStr] = Field(
        default_factory=dict, description="numeric project id → that project's hook secret"
    )
    gitlab_projects: str = ""
    api_tokens: str = ""
    max_webhook_bytes: int = Field(default=5 * 1024 * 1024, gt=0, description="largest webhook body accepted")
    max_request_bytes: int = Field(
        default=256 * 1024,
        gt=0,
        description="largest body on every other route (a vote, a login): refused with 413 before it is read",
    )
    webhook_body_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="a webhook's whole body must arrive within this many seconds of its authenticated headers, "
        "else 408 (GitLab itself gives up on a hook after 10 s)",
    )
    webhook_body_reads: int = Field(
        default=16,
        gt=0,
        description="webhook bodies read at once; past it, 503 with Retry-After. With max_webhook_bytes it bounds "
        "what slow senders can make the API hold (16 x 5 MiB)",
    )
    max_requests_in_flight: int = Field(
        default=256,
        gt=0,
        description="HTTP requests `reviewloop serve` handles at once; past it, 503 with Retry-After. Idle "
        "connections do not count: they are closed when their request head is late (api/http_server.py)",
    )
    request_head_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="a connection must send its whole request line and headers within this many seconds of "
        "opening (or of a later request's first byte), else it is closed; idle kept-alive ones close after 5 s",
    )
    trusted_proxies: str = Field(
        default="127.0.0.1",
        description="addresses or CIDR ranges (comma-separated, '*' = any) whose X-Forwarded-Proto/-For "
        "headers uvicorn believes: the TLS-terminating proxy or Ingress in front of `serve`",
    )
    api_docs: bool = Field(
        default=False,
        description="serve /docs, /redoc and /openapi.json (a map of every route: off unless asked for)",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="bearer token Prometheus presents on GET /metrics; unset = /metrics is off (404)",
    )
    metrics_cache_s: float = Field(
        default=15.0,
        ge=0,
        description="how long one reading of the database's counts serves /metrics (Prometheus' default "
        "scrape interval): scrapes cost at most one round of queries per this many seconds",
    )

    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="OpenTelemetry collector (OTLP/HTTP); spans go to Postgres either way",
    )
    shadow_strategies: int = 0
    retrain_cron: str | None = None
    retention_days: int = Field(
        default=30,
        ge=0,
        description="handled webhook events and finished queue jobs older than this are deleted "
        "daily; 0 keeps them (reviews, findings, feedback and spans are always kept)",
    )
    max_diff_lines_per_file: int = 5000
    review_token_budget: int = 24000
    review_deadline_s: float = Field(
        default=900.0,
        gt=0,
        description="reviewers stop taking steps this long after a review starts; what they did not reach "
        "is named in the summary's not-reviewed list",
    )

    hold_by_track_record: bool = Field(
        default=True,
        description="send the findings of a rule mostly wrong on held-out open-source history to a person "
        "(listed in the summary) until three people on the project accept it; false posts them as threads",
    )
    posting: Literal["proven", "all"] = Field(  # agent.verdicts.posting.Posting
        default="proven",
        description="proven: post a thread only for rules proven right on open-source code they were not "
        "tuned on, defects in the text itself, request data reaching an injection sink, critical findings "
        "and rules the project's people accepted; list every other finding for a person in the summary. "
        "all: post every rule no track record holds back",
    )

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url and self.llm_model) or self.llm_model_path is not None

    @property
    def gitlab_configured(self) -> bool:
        """Both the instance and the bot's token: without them reviews of merge requests wait in the queue."""
        return bool(self.gitlab_url) and self.gitlab_token is not None

    @property
    def gitlab_project_allowlist(self) -> set[str]:
        return {p.strip() for p in self.gitlab_projects.split(",") if p.strip()}

    @field_validator("project_secrets")
    @classmethod
    def _secrets_by_project_id(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        """Keys are numeric ids: a hook's id is what its job reviews, a path in its body is only a claim."""
        bad = sorted(key for key in value if not key.strip().isdigit())
        if bad:
            raise ValueError(f"REVIEWLOOP_PROJECT_SECRETS keys must be numeric project ids, not {bad}")
        # "042" is not how GitLab writes project 42: kept as is it would never match a hook, which
        # then fell back to the global secret without a word (issue 40)
        padded = sorted(key.strip() for key in value if str(int(key)) != key.strip())
        if padded:
            hint = ", ".join(f"{key!r} → {int(key)}" for key in padded)
            raise ValueError(f"REVIEWLOOP_PROJECT_SECRETS keys must be project ids as GitLab writes them ({hint})")
        return {key.strip(): secret for key, secret in value.items()}

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> Settings:
        if self.environment == "production":
            for name in ("webhook_secret", "gitlab_token"):
                value = getattr(self, name)
                if value is not None and value.get_secret_value().strip().lower() in PLACEHOLDER_SECRETS:
                    raise ValueError(f"REVIEWLOOP_{name.upper()} is a placeholder; set a real secret")
            hook_secrets = {"REVIEWLOOP_WEBHOOK_SECRET": self.webhook_secret} | {
                f"REVIEWLOOP_PROJECT_SECRETS[{key}]": secret for key, secret in self.project_secrets.items()
            }
            for where, secret in hook_secrets.items():
                if secret is not None and len(secret.get_secret_value().strip()) < MIN_SECRET_CHARS:
                    raise ValueError(
                        f"{where} is shorter than {MIN_SECRET_CHARS} characters; production needs a long random "
                        "secret (`openssl rand -base64 24` writes one)"
                    )
        return self


def describe_settings_error(error: ValidationError) -> str:
    """A settings validation error as one line, without the values: pydantic's own text quotes the
    input, and for a secret that printed part of it (issue 40)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", "invalid"))
        parts.append(f"{where}: {message}" if where else message)
    return "invalid settings: " + "; ".join(parts)
