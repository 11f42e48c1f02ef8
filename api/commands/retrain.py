"""`reviewloop retrain`: dataset → SFT → DPO/KTO → StraTA RL → evaluation gate → promotion.

The same pipeline the worker's periodic job and the Kubernetes CronJob run (api/retrain_task.py).
With no options it takes everything from the settings, as deploy/ runs it. Exit status: 0 when the
run finished (whether or not it promoted), 1 when it failed or cannot start, 75 (EX_TEMPFAIL) when
another retrain is running and this one was refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from agent.service_settings import Settings
from api.commands import out
from api.commands.app import app
from reviewers.kernel.errors import ReviewloopError

BUSY_EXIT = 75  # sysexits EX_TEMPFAIL: nothing is wrong, try again later


@app.command("retrain")
def retrain_command(
    base_model: Annotated[
        Path | None,
        typer.Option("--base-model", help="local base model directory (default: REVIEWLOOP_LLM_MODEL_PATH)"),
    ] = None,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="where datasets and adapters go (default: <data dir>/retrain)"),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="JSON or TOML file of RetrainConfig fields (tables sft, dpo, kto, rl, reward)"),
    ] = None,
) -> None:
    """Retrain the strategy model from reviews and feedback; promote it only if it beats the one in service."""
    # the learning code (and torch) loads here, not when the CLI starts
    from api.retrain_task import run_retrain
    from learning.retrain import RetrainBusyError

    try:
        report = run_retrain(Settings(), base_model=base_model, work_dir=work_dir, config_file=config)
    except RetrainBusyError as exc:
        typer.echo(f"reviewloop: {exc}", err=True)
        raise typer.Exit(BUSY_EXIT) from None
    except ReviewloopError as exc:
        typer.echo(f"reviewloop: {exc}", err=True)
        raise typer.Exit(1) from None
    table = Table("stage", "status", "run", "reason", title=f"retrain run {report.run_id}: {report.status}")
    for stage in report.stages:
        table.add_row(stage.kind, stage.status, str(stage.run_id or "-"), stage.reason or "")
    out().print(table)
    if report.decision is not None:
        verdict = "promoted" if report.promoted else "kept the version in service"
        out().print(
            f"gate: {report.decision} (candidate version {report.candidate_version_id or '-'}); {verdict}; in"
            f" service: {report.serving_version_id or 'rules'}",
            markup=False,
            highlight=False,
        )
    if report.status == "failed":
        typer.echo(f"reviewloop: retrain run {report.run_id} failed: {report.reason}", err=True)
        raise typer.Exit(1)
