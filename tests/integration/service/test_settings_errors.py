"""Settings a mistake can make dangerous are refused at start, and the refusal shows no secret
(issue 40, low items): a validation error printed the tail of a secret; production took a
three-character hook secret; a per-project secret under "042" silently fell back to the global one.
Through the `reviewloop` command line, as an operator meets them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from agent.service_settings import MIN_SECRET_CHARS, Settings

REPO = Path(__file__).resolve().parents[3]
SECRET_TAIL = "tail-of-the-secret-Q7"  # noqa: S105 - what must never be printed


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWLOOP_")}
    return subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", *args],
        env={**clean, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REVIEWLOOP_PROJECT_SECRETS": f'{{"team/app": "{SECRET_TAIL}"}}'}, "keys must be numeric project ids"),
        ({"REVIEWLOOP_PROJECT_SECRETS": f'{{"042": "{SECRET_TAIL}"}}'}, "'042' → 42"),
        ({"REVIEWLOOP_PROJECT_SECRETS": f'{{"42": 12, "7": ["{SECRET_TAIL}"]}}'}, "project_secrets.7"),
        (
            {"REVIEWLOOP_ENVIRONMENT": "production", "REVIEWLOOP_WEBHOOK_SECRET": SECRET_TAIL[:5]},
            f"shorter than {MIN_SECRET_CHARS} characters",
        ),
    ],
)
def test_a_bad_setting_is_one_line_without_the_secret(env: dict[str, str], message: str, tmp_path: Path) -> None:
    env = {
        "REVIEWLOOP_DATABASE_URL": "postgresql://unused@127.0.0.1:1/unused",
        "REVIEWLOOP_DATA_DIR": str(tmp_path),
        **env,
    }
    result = run_cli(env, "serve", "--port", "1")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reviewloop: invalid settings: "), result.stderr
    assert message in lines[0]
    assert SECRET_TAIL[:5] not in result.stderr + result.stdout  # at 2a83aab: pydantic quoted the value


def test_production_refuses_short_project_secrets_and_accepts_long_ones() -> None:
    base = {"database_url": "postgresql://unused@127.0.0.1:1/unused", "environment": "production"}
    long_secret = SecretStr("x" * MIN_SECRET_CHARS)
    with pytest.raises(ValidationError, match=r"PROJECT_SECRETS\[42\] is shorter"):
        Settings(**base, webhook_secret=long_secret, project_secrets={"42": SecretStr("short")})
    Settings(**base, webhook_secret=long_secret, project_secrets={"42": long_secret})
    Settings(database_url=base["database_url"], webhook_secret=SecretStr("dev"))  # development: any length
