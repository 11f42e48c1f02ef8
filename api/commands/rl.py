"""`reviewloop train rl`, `reviewloop train status`, `reviewloop eval-model` and `reviewloop dev synthetic-replay`.

StraTA RL on the replay environment, its step metrics from `training_runs`, and the evaluation gate
that promotes a candidate only when it beats the baseline. torch and the learning code load inside
the commands. A mistake a user can make prints one line and exits 1.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent.service_settings import Settings
from api.commands import out
from api.commands.app import app
from api.commands.dev import dev_app
from api.commands.learning import train_app
from reviewers.kernel.errors import ReviewloopError

if TYPE_CHECKING:
    from agent.store.db import Pool


err = Console(stderr=True)

Ablation = Literal["full", "no_fps", "no_judge", "plain_mean", "no_filter"]
STEP_COLUMNS = ("step", "reward_mean", "reward_std", "strategy_diversity", "entropy", "grad_norm", "clip_fraction",
                "judge_flag_rate", "valid_share")  # fmt: skip


def fail(message: object) -> typer.Exit:
    typer.echo(f"reviewloop: {message}", err=True)
    return typer.Exit(1)


@contextmanager
def _store(enabled: bool = True) -> Iterator[Pool | None]:
    if not enabled:
        yield None
        return
    from agent.store.db import connect_store

    settings = Settings()
    pool = connect_store(database_url=settings.database_url, data_dir=settings.data_dir, pool_size=2)
    try:
        yield pool
    finally:
        pool.close()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "-" if value is None else str(value)


@train_app.command("rl")
def train_rl_command(
    base_model: Annotated[Path, typer.Option(help="local model directory (the base under any adapter)")],
    replay: Annotated[Path, typer.Option(help="replay cases: a dataset directory or a JSONL file")],
    out_dir: Annotated[Path, typer.Option("--out", help="directory for checkpoints and the trained adapter")],
    adapter: Annotated[Path | None, typer.Option(help="LoRA adapter to continue (e.g. from train sft)")] = None,
    config: Annotated[Path | None, typer.Option(help="JSON config: sections strata, train, policy, env, ...")] = None,
    resume: Annotated[bool, typer.Option(help="continue from the latest checkpoint in --out")] = False,
    ablation: Annotated[Ablation, typer.Option(help="switch one mechanism off")] = "full",
    register: Annotated[str | None, typer.Option(help="register the result as a candidate version")] = None,
    store: Annotated[bool, typer.Option(help="record the run and its step metrics in the database")] = True,
) -> None:
    """StraTA RL of the strategy model on a replay set (fixed executor: the strategy tokens are trained)."""
    from learning.train_rl import load_rl_config, train_rl

    try:
        run_config = load_rl_config(config, ablation=ablation)
        with (
            _store(store or register is not None) as pool,
            Progress(
                TextColumn("RL"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=err,
            ) as progress,
        ):
            task = progress.add_task("rl", total=run_config.strata.max_steps, info="")

            def step_done(step: int, metrics: Mapping[str, Any]) -> None:
                info = f"reward {metrics['reward_mean']:.3f} ± {metrics['reward_std']:.3f}"
                progress.update(task, completed=step, info=info)

            result = train_rl(
                base_model=base_model,
                replay=replay,
                out_dir=out_dir,
                config=run_config,
                adapter=adapter,
                db=pool,
                resume=resume,
                on_step_end=step_done,
            )
            version_id = None
            if register is not None and pool is not None:
                from agent.store.models import register_version

                version_id = register_version(
                    pool,
                    name=register,
                    base_model=result.base_model,
                    adapter_path=result.adapter_path,
                    metrics=result.metrics,
                    executor="analyzer-only",  # the trainer's fixed executor: the replay analyzers
                )
    except ReviewloopError as exc:
        raise fail(exc) from None
    if not result.main_process:
        return  # another rank of `accelerate launch`: rank 0 reports
    table = Table("measure", "before", "after", title=f"held-out replay ({result.metrics.get('eval_cases', 0)} MRs)")
    for mode in ("greedy", "sampled"):
        for key in ("mean_reward", "f1", "mean_steps", "valid_share"):
            before = result.metrics.get(f"before_{mode}_{key}")
            after = result.metrics.get(f"after_{mode}_{key}")
            if before is not None or after is not None:
                table.add_row(f"{mode} {key}", _fmt(before), _fmt(after))
    out().print(table)
    resumed = f" (resumed from step {result.resumed_from})" if result.resumed_from else ""
    typer.echo(f"trained {result.steps} steps{resumed}; saved to {result.out_dir}")
    if result.run_id is not None:
        typer.echo(f"training run {result.run_id}")
    if version_id is not None:
        typer.echo(f"registered candidate version {version_id} ({register})")


@train_app.command("status")
def train_status_command(
    run: Annotated[int | None, typer.Option(help="a training run id; default: the latest RL runs")] = None,
    limit: Annotated[int, typer.Option(help="how many runs to list")] = 10,
) -> None:
    """Show RL runs, or one run's step metrics (reward, diversity, entropy, gradient norm, clipping)."""
    from agent.store.models import get_run, list_runs

    try:
        with _store() as pool:
            assert pool is not None  # _store() opens one unless disabled
            if run is None:
                rows = list_runs(pool, limit=limit, kind="rl")
                table = Table("run", "status", "started", "steps", "last reward", "reason")
                for r in rows:
                    steps = r["step_metrics"] or []
                    last = steps[-1].get("reward_mean") if steps else None
                    table.add_row(
                        str(r["id"]), r["status"], f"{r['started_at']:%Y-%m-%d %H:%M}", str(len(steps)),
                        _fmt(last), r["reason"] or "",
                    )  # fmt: skip
                out().print(table if rows else "no RL runs yet")
                return
            row = get_run(pool, run)
    except ReviewloopError as exc:
        raise fail(exc) from None
    if row is None:
        raise fail(f"no training run with id {run}")
    table = Table(*STEP_COLUMNS, title=f"run {row['id']} ({row['kind']}, {row['status']})")
    for metrics in row["step_metrics"] or []:
        table.add_row(*(_fmt(metrics.get(c)) for c in STEP_COLUMNS))
    out().print(table)
    if row["metrics"]:
        typer.echo("final: " + ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(row["metrics"].items())))


@app.command("eval-model")
def eval_model_command(
    candidate: Annotated[str, typer.Option(help="candidate model version: id or name")],
    replay: Annotated[
        Path,
        typer.Option(
            "--replay",
            "--env",
            help="replay cases (eval split): a dataset directory, or a JSONL file such as `dev make-env` writes",
        ),
    ],
    baseline: Annotated[
        str | None, typer.Option(help="baseline version id or name, or 'rules'; default: the one in service")
    ] = None,
    margin: Annotated[
        float,
        typer.Option(
            help="the paired 95% interval's lower bound of the candidate's reward difference (per MR, vs the "
            "baseline and vs the best fixed rule) must be above this"
        ),
    ] = 0.0,
    config: Annotated[Path | None, typer.Option(help="the RL JSON config whose env and reward sections apply")] = None,
    device: Annotated[Literal["auto", "cpu", "cuda"], typer.Option(help="where the models run")] = "auto",
    apply: Annotated[bool, typer.Option(help="promote or reject the candidate (else only report)")] = True,
) -> None:
    """The evaluation gate: evaluate candidate and baseline on held-out MRs; promote only a better candidate."""
    from learning.gate import run_gate
    from learning.replay import ReplayEnv, load_replay_cases
    from learning.train_rl import load_rl_config

    try:
        run_config = load_rl_config(config)
        cases = load_replay_cases(replay, split="eval")
        with _store() as pool:
            assert pool is not None
            report = run_gate(
                pool,
                candidate=candidate,
                baseline=baseline,
                cases=cases,
                margin=margin,
                env=ReplayEnv(run_config.env),
                reward_config=run_config.reward,
                device=device,
                max_new_tokens=run_config.strata.max_new_tokens,
                apply=apply,
            )
    except ReviewloopError as exc:
        raise fail(exc) from None
    table = Table("measure", f"candidate {report.candidate}", f"baseline {report.baseline}", title=f"{len(cases)} MRs")
    cand, base = report.candidate_numbers.as_dict(), report.baseline_numbers.as_dict()
    for key in ("mean_reward", "precision", "recall", "f1", "mean_steps", "valid_share"):
        table.add_row(key, _fmt(cand[key]), _fmt(base[key]))
    out().print(table)
    verdict = "promote" if report.decision.promote else "refuse"
    applied = "" if apply else " (not applied)"
    if report.decision.best_fixed_rule:
        typer.echo(f"best fixed rule on these MRs: {report.decision.best_fixed_rule}")
    typer.echo(f"{verdict}{applied}: {report.decision.reason} [eval run {report.run_id}]")


@dev_app.command("synthetic-replay")
def synthetic_replay_command(
    out_file: Annotated[Path, typer.Argument(help="JSONL file to write the cases into")],
    n_train: Annotated[int, typer.Option(help="merge requests in the train split")] = 32,
    n_eval: Annotated[int, typer.Option(help="merge requests in the eval split")] = 16,
    seed: Annotated[int, typer.Option(help="the same seed gives the same cases")] = 0,
) -> None:
    """Generated merge requests with planted problems, for CPU demos of `train rl` (learning/strata/synthetic.py)."""
    from learning.replay import write_jsonl_cases
    from learning.strata.synthetic import SyntheticConfig, generate_replay_set

    try:
        cases = generate_replay_set(SyntheticConfig(n_train=n_train, n_eval=n_eval, seed=seed))
    except ReviewloopError as exc:
        raise fail(exc) from None
    write_jsonl_cases(out_file, cases)
    typer.echo(f"{len(cases)} replay cases written to {out_file}")
