"""`reviewloop dataset build`, `reviewloop train sft|dpo|kto` and `reviewloop models …`.

The learning code (and with it torch, transformers, TRL) is imported inside each command, so the
CLI and the API start without it. Errors a user can cause (an empty database, a missing model
path, a dataset too small or damaged, an unknown version) print one line and exit 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Column, Table

from agent.service_settings import Settings
from api.commands import out
from api.commands.app import app
from reviewers.kernel.errors import ReviewloopError

if TYPE_CHECKING:
    from agent.store.db import Pool

dataset_app = typer.Typer(help="Training sets built from reviews and feedback.", no_args_is_help=True)
train_app = typer.Typer(help="Train the strategy model (SFT, DPO, KTO) on a built dataset.", no_args_is_help=True)
models_app = typer.Typer(help="The strategy model registry: list, register, promote, roll back.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")
app.add_typer(train_app, name="train")
app.add_typer(models_app, name="models")


def fail(message: object) -> typer.Exit:
    """One clear line on stderr and exit status 1."""
    # typer.echo, not rich: a long message must stay one line, whatever the terminal width
    typer.echo(f"reviewloop: {message}", err=True)
    return typer.Exit(1)


@contextmanager
def _store() -> Iterator[Pool]:
    from agent.store.db import connect_store

    settings = Settings()
    pool = connect_store(database_url=settings.database_url, data_dir=settings.data_dir, pool_size=2)
    try:
        yield pool
    finally:
        pool.close()


def _parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise fail(f"--since {value!r} is not a date (use YYYY-MM-DD or an ISO timestamp)") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataset_app.command("build")
def dataset_build(
    out_dir: Annotated[Path, typer.Option("--out", help="directory to write the datasets and card into")],
    since: Annotated[str | None, typer.Option(help="only reviews from this date on (YYYY-MM-DD)")] = None,
    eval_fraction: Annotated[float, typer.Option(help="share of the latest merge requests held out")] = 0.2,
) -> None:
    """Build strategy_sft, strategy_dpo, strategy_kto and replay from the store."""
    from learning.datasets import DatasetConfig, build_datasets

    since_at = _parse_since(since)
    try:
        with _store() as pool:
            card = build_datasets(pool, out_dir, since=since_at, config=DatasetConfig(eval_fraction=eval_fraction))
    except ReviewloopError as exc:
        raise fail(exc) from None
    table = Table("dataset", "train", "eval", title=f"{out_dir} (snapshot {card.snapshot_id})")
    for kind, counts in card.counts.items():
        table.add_row(kind, str(counts["train"]), str(counts["eval"]))
    out().print(table)
    out().print(f"{card.reviews} reviews, labels: {card.labels}", markup=False, highlight=False)


Method = Literal["sft", "dpo", "kto"]


def _train(
    method: Method, *, base_model: Path, dataset: Path, out_dir: Path, config_file: Path | None, store: bool
) -> None:
    from learning.datasets import load_dataset
    from learning.train_configs import DPOTrainingConfig, KTOTrainingConfig, SFTTrainingConfig, load_config
    from learning.training import TrainResult, check_base_model

    try:
        # the cheap checks first, before a database or a model is opened
        check_base_model(base_model)
        with _store() if store else _no_store() as pool:
            result: TrainResult
            if method == "sft":
                from learning.train_sft import train_sft

                sft_config = load_config(SFTTrainingConfig, config_file)
                load_dataset(dataset, "strategy_sft")
                result = train_sft(
                    base_model=base_model, dataset_dir=dataset, out_dir=out_dir, config=sft_config, db=pool
                )
            elif method == "dpo":
                from learning.train_dpo import train_dpo

                dpo_config = load_config(DPOTrainingConfig, config_file)
                load_dataset(dataset, "strategy_dpo")
                result = train_dpo(
                    base_model=base_model, dataset_dir=dataset, out_dir=out_dir, config=dpo_config, db=pool
                )
            else:
                from learning.train_kto import train_kto

                kto_config = load_config(KTOTrainingConfig, config_file)
                load_dataset(dataset, "strategy_kto")
                result = train_kto(
                    base_model=base_model, dataset_dir=dataset, out_dir=out_dir, config=kto_config, db=pool
                )
    except ReviewloopError as exc:
        raise fail(exc) from None
    shown = ", ".join(f"{k}={v:.4g}" for k, v in result.metrics.items() if isinstance(v, float))
    run = f" (training run {result.run_id})" if result.run_id is not None else ""
    out().print(f"{method} done{run}: {result.out_dir}", markup=False, highlight=False)
    out().print(shown, markup=False, highlight=False)


@contextmanager
def _no_store() -> Iterator[None]:
    yield None


BaseModelOpt = Annotated[Path, typer.Option("--base-model", help="local model directory (save_pretrained)")]
DatasetOpt = Annotated[Path, typer.Option("--dataset", help="a directory `reviewloop dataset build` wrote")]
OutOpt = Annotated[Path, typer.Option("--out", help="new directory for the adapter and training.json")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="JSON or TOML file of config fields")]
StoreOpt = Annotated[bool, typer.Option(help="record the run and its step metrics in training_runs")]


@train_app.command("sft")
def train_sft_command(
    base_model: BaseModelOpt, dataset: DatasetOpt, out_dir: OutOpt, config: ConfigOpt = None, store: StoreOpt = True
) -> None:
    """Supervised fine-tuning on strategy_sft (well-received strategies)."""
    _train("sft", base_model=base_model, dataset=dataset, out_dir=out_dir, config_file=config, store=store)


@train_app.command("dpo")
def train_dpo_command(
    base_model: BaseModelOpt, dataset: DatasetOpt, out_dir: OutOpt, config: ConfigOpt = None, store: StoreOpt = True
) -> None:
    """Direct preference optimisation on strategy_dpo (better vs. worse strategy for one MR)."""
    _train("dpo", base_model=base_model, dataset=dataset, out_dir=out_dir, config_file=config, store=store)


@train_app.command("kto")
def train_kto_command(
    base_model: BaseModelOpt, dataset: DatasetOpt, out_dir: OutOpt, config: ConfigOpt = None, store: StoreOpt = True
) -> None:
    """KTO on strategy_kto (unpaired thumbs-up / thumbs-down strategies)."""
    _train("kto", base_model=base_model, dataset=dataset, out_dir=out_dir, config_file=config, store=store)


@models_app.command("list")
def models_list() -> None:
    """Every model version, newest first."""
    from agent.store.models import list_versions

    try:
        with _store() as pool:
            versions = list_versions(pool)
    except ReviewloopError as exc:
        raise fail(exc) from None
    if not versions:
        out().print("no model versions yet; the rule-based strategy serves")
        return
    # the identifying columns never wrap; the paths fold when the terminal is narrow
    table = Table(
        Column("id", no_wrap=True),
        Column("name", no_wrap=True),
        Column("stage", no_wrap=True),
        "base model",
        "adapter",
        "dataset",
        "parent",
        "created",
    )
    for v in versions:
        table.add_row(
            str(v["id"]),
            v["name"],
            v["stage"],
            v["base_model"],
            v["adapter_path"] or "-",
            v["dataset_snapshot"] or "-",
            str(v["parent_id"] or "-"),
            f"{v['created_at']:%Y-%m-%d %H:%M}",
        )
    out().print(table)


@models_app.command("register")
def models_register(
    trained: Annotated[Path, typer.Argument(help="a directory `reviewloop train` wrote")],
    name: Annotated[str | None, typer.Option(help="version name (default: strategy-<kind>-<dataset>-<time>)")] = None,
    parent: Annotated[str | None, typer.Option(help="id or name of the version it was trained from")] = None,
) -> None:
    """Register a trained adapter as a candidate version."""
    from learning.registry import register_trained

    try:
        with _store() as pool:
            row = register_trained(pool, trained, name=name, parent=parent)
    except ReviewloopError as exc:
        raise fail(exc) from None
    out().print(f"registered version {row['id']} ({row['name']}) as {row['stage']}", markup=False, highlight=False)


@models_app.command("promote")
def models_promote(version: Annotated[str, typer.Argument(help="version id or name")]) -> None:
    """Put a version in service; the one it replaces is archived."""
    from learning.registry import promote_version

    try:
        with _store() as pool:
            row = promote_version(pool, version)
    except ReviewloopError as exc:
        raise fail(exc) from None
    out().print(f"version {row['id']} ({row['name']}) is in production", markup=False, highlight=False)


@models_app.command("rollback")
def models_rollback() -> None:
    """Reject the version in service and restore the one that served before it."""
    from learning.registry import rollback_version

    try:
        with _store() as pool:
            row = rollback_version(pool)
    except ReviewloopError as exc:
        raise fail(exc) from None
    out().print(f"rolled back: version {row['id']} ({row['name']}) is in production", markup=False, highlight=False)
