"""Who may talk to us: GitLab (the webhook's shared secret) and API clients (bearer tokens).

Secrets are compared with `hmac.compare_digest` only, never logged, and never stored in plain text:
API tokens live in `api_tokens` as sha256 hashes, or in `REVIEWLOOP_API_TOKENS` ("name:token,...").

A stored token may be scoped to projects (`api_tokens.projects`, GitLab's numeric ids as
`reviews.project` holds them): it reaches those projects' reviews and findings only. A stored
token without projects, and every token from the environment, is an admin token (every project).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psycopg
from pydantic import SecretStr

from api.db import DbConnection
from reviewers.kernel.errors import ConfigError

TOKEN_BYTES = 32  # 256 bits of entropy: a bearer token cannot be guessed


@dataclass(frozen=True)
class Principal:
    """Who presented an API token: its name, and the projects it reaches (None: every project)."""

    name: str
    projects: frozenset[str] | None = None

    @property
    def project_list(self) -> list[str] | None:
        """The scope as a SQL parameter (`r.project = ANY(...)`); None for an admin token."""
        return None if self.projects is None else sorted(self.projects)

    def reaches(self, project: str) -> bool:
        return self.projects is None or project in self.projects


def webhook_secret_for(
    *, project_id: int | None, project_secrets: Mapping[str, SecretStr], global_secret: SecretStr | None
) -> SecretStr | None:
    """The secret the hook of project `project_id` must carry: its own one if configured, else the global one.

    Chosen by the numeric id alone: the id is what the review job targets, and a path in a hook body
    is just a claim (issue 11: a hook naming an allowed path beside another project's id).
    """
    if project_id is not None and str(project_id) in project_secrets:
        return project_secrets[str(project_id)]
    return global_secret


def matches_any_secret(
    presented: str | None, *, project_secrets: Mapping[str, SecretStr], global_secret: SecretStr | None
) -> bool:
    """Whether `presented` is one of the configured hook secrets, compared with each (no early exit).

    Checked before the body is parsed, so a sender without a secret cannot make us parse anything;
    which project the secret belongs to is checked after parsing, with `webhook_secret_for`.
    """
    found = False
    for secret in (global_secret, *project_secrets.values()):
        found = token_matches(presented, secret) or found
    return found


def token_matches(presented: str | None, expected: SecretStr | None) -> bool:
    """Constant-time equality; a missing token or an unconfigured secret never matches."""
    if presented is None or expected is None:
        return False
    wanted = expected.get_secret_value()
    if not wanted:
        return False
    return hmac.compare_digest(presented.encode(), wanted.encode())


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "rl_" + secrets.token_urlsafe(TOKEN_BYTES)


def parse_env_tokens(spec: str) -> list[tuple[str, str]]:
    """`name:token,name2:token2` → [(name, token)]; malformed entries are a configuration error."""
    out: list[tuple[str, str]] = []
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, token = entry.partition(":")
        if not sep or not name.strip() or not token.strip():
            raise ValueError("REVIEWLOOP_API_TOKENS must be 'name:token' pairs separated by commas")
        out.append((name.strip(), token.strip()))
    return out


def match_env_token(presented: str, tokens: list[tuple[str, str]]) -> str | None:
    """The name of the configured token equal to `presented`; every entry is compared (no early exit)."""
    found: str | None = None
    for name, token in tokens:
        if hmac.compare_digest(presented.encode(), token.encode()) and found is None:
            found = name
    return found


async def match_stored_token(conn: DbConnection, presented: str) -> Principal | None:
    """The unrevoked stored token whose hash equals the presented token's hash, with its scope."""
    return await stored_principal(conn, hash_token(presented))


async def stored_principal(conn: DbConnection, token_hash: str) -> Principal | None:
    cur = await conn.execute(
        "SELECT name, token_hash, projects FROM api_tokens WHERE token_hash = %s AND revoked_at IS NULL",
        (token_hash,),
    )
    row = await cur.fetchone()
    if row is None or not hmac.compare_digest(str(row["token_hash"]), token_hash):
        return None
    projects = row["projects"]
    return Principal(str(row["name"]), None if projects is None else frozenset(str(p) for p in projects))


async def principal_for_hash(
    conn: DbConnection, token_hash: str, env_tokens: list[tuple[str, str]]
) -> Principal | None:
    """The token with this sha256 if we still accept it (configured, or stored unrevoked), with its
    scope as it is now: a dashboard session keeps the hash only, so a changed scope applies at once."""
    configured: str | None = None
    for name, token in env_tokens:
        if hmac.compare_digest(hash_token(token), token_hash) and configured is None:
            configured = name
    if configured is not None:
        return Principal(configured)  # a token from the environment is an admin token
    return await stored_principal(conn, token_hash)


def parse_project_ids(projects: Iterable[str]) -> list[str] | None:
    """`--project` values → the scope to store (None: none given, an admin token).

    Numeric GitLab ids only, as `reviews.project` holds them: a path would match no review and
    leave a token that silently reaches nothing.
    """
    out: list[str] = []
    for project in projects:
        value = project.strip()
        if not value.isascii() or not value.isdigit() or int(value) <= 0:
            raise ConfigError(f"--project must be a numeric GitLab project id, got {project!r}")
        out.append(str(int(value)))
    return sorted(set(out), key=int) if out else None


def create_api_token(dsn: str, name: str, *, projects: Iterable[str] = ()) -> str:
    """Store a new token's hash under `name` and return the token (shown once, never stored); with
    `projects`, the token reaches those projects only, else every project (an admin token)."""
    scope = parse_project_ids(projects)
    token = new_token()
    with psycopg.connect(dsn) as conn:
        try:
            conn.execute(
                "INSERT INTO api_tokens (name, token_hash, projects) VALUES (%s, %s, %s)",
                (name, hash_token(token), scope),
            )
        except psycopg.errors.UniqueViolation as exc:
            raise ConfigError(f"an API token named {name!r} already exists") from exc
    return token


def revoke_api_token(dsn: str, name: str) -> None:
    """Mark the stored token `name` revoked (kept, for the record); unknown or already revoked: an error."""
    with psycopg.connect(dsn) as conn:
        cur = conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE name = %s AND revoked_at IS NULL", (name,))
        if cur.rowcount != 1:
            raise ConfigError(f"no unrevoked API token named {name!r}")
