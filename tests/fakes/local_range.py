"""A scratch git repository with one change, tagged `base` and committed as HEAD, and its review
through the CLI (`reviewloop review REPO --base base --head HEAD --format json`): the shape most
analyzer tests through the command line need."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from typer.testing import CliRunner


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def write_files(repo: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)


def change_repo(repo: Path, base: dict[str, str], head: dict[str, str]) -> Path:
    """`repo` with a README and `base` committed and tagged `base`, then `head` written over it and committed."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "dev")
    write_files(repo, {"README.md": "demo\n", **base})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    write_files(repo, head)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    return repo


def review_report(repo: Path, *extra: str) -> dict[str, Any]:
    """The JSON report of the change from `base` to HEAD; the command must exit 0."""
    from api.cli import app

    args = ["review", str(repo), "--base", "base", "--head", "HEAD", "--format", "json", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report
