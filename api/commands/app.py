"""The `reviewloop` Typer application, apart from `api.cli` so that the command modules can register
on it without importing `api.cli` (which would run twice under `python -m api.cli`)."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="reviewloop",
    help="A code-review agent for GitLab merge requests that learns from its reviewers' feedback.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
