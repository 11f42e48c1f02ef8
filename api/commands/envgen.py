"""`reviewloop dev make-env`: a verifiable merge-request environment from a directory of real Python code.

The learning code (learning/envgen) loads inside the command. A mistake a user can make (a source
tree without Python files, one package that does not split, a profile naming an unknown category or
kind) prints one line and exits 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from api.commands.dev import dev_app
from reviewers.kernel.errors import ReviewloopError


def fail(message: object) -> typer.Exit:
    typer.echo(f"reviewloop: {message}", err=True)
    return typer.Exit(1)


@dev_app.command("make-env")
def make_env_command(
    source: Annotated[
        Path,
        typer.Option(
            help="directory of Python packages (e.g. a virtualenv's site-packages), or one package or project"
            " directory, which is split by its sub-packages or directories"
        ),
    ],
    out_file: Annotated[Path, typer.Option("--out", help="JSONL file to write the replay cases into")],
    n: Annotated[int, typer.Option(help="merge requests in all (train and held-out)")] = 64,
    seed: Annotated[int, typer.Option(help="the same seed and source give the same merge requests")] = 0,
    profile: Annotated[
        Path | None, typer.Option(help="team profile JSON for every MR (default: --profiles teams seeded from --seed)")
    ] = None,
    profiles: Annotated[int, typer.Option(help="seeded teams, one drawn per merge request")] = 10,
    heldout_fraction: Annotated[float, typer.Option(help="share of packages held out for evaluation")] = 0.3,
    budget_fraction: Annotated[float, typer.Option(help="review budget as a share of the changed files")] = 0.3,
    min_files: Annotated[int, typer.Option(help="fewest changed files per merge request")] = 10,
    max_files: Annotated[int, typer.Option(help="most changed files per merge request")] = 16,
) -> None:
    """Merge requests from real released code: benign edits, planted defects and decoys, labeled lines.

    Training and held-out merge requests come from different packages. The team profiles used are
    written next to the output as FILE.profiles.json.
    """
    from learning.envgen.build import EnvGenConfig, make_env, seeded_profiles
    from learning.envgen.profile import load_profile
    from learning.envgen.sources import discover_packages
    from learning.replay import write_jsonl_cases

    try:
        config = EnvGenConfig(
            n=n, seed=seed, heldout_fraction=heldout_fraction, budget_fraction=budget_fraction,
            min_files=min_files, max_files=max_files, n_profiles=profiles,
        )  # fmt: skip
        teams = [load_profile(profile)] if profile is not None else seeded_profiles(config)
        packages = discover_packages(source, min_files=config.min_files)
        cases = make_env(packages, config, teams)
    except ReviewloopError as exc:
        raise fail(exc) from None
    write_jsonl_cases(out_file, cases)
    profile_file = out_file.with_suffix(".profiles.json")
    profile_file.write_text(json.dumps([t.model_dump() for t in teams], indent=2) + "\n", encoding="utf-8")
    by_split = {s: sorted({c.package or "" for c in cases if c.split == s}) for s in ("train", "eval")}
    planted = sum(1 for c in cases for f in c.findings if not f.kind.startswith("decoy:"))
    typer.echo(
        f"{len(cases)} merge requests written to {out_file} ({planted} planted defects); "
        f"train packages: {', '.join(by_split['train'])}; held-out packages: {', '.join(by_split['eval'])}; "
        f"{len(teams)} team profiles: {profile_file}"
    )
