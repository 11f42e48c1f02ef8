"""`reviewloop review`, `reviewloop eval` and `reviewloop demo`: reviews on this machine."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from agent.context import ReviewRequest
from agent.evaluation import ExpectedFinding, MatchResult, NegativeLine, match_findings, score_matches
from agent.reporter import REPORT_FORMATS, ReportFormat, render_report, shown
from agent.service_settings import Settings
from api.commands.app import app
from reviewers.kernel.contracts import SEVERITY_RANK, NotReviewed, Severity
from reviewers.kernel.errors import ReviewloopError

if TYPE_CHECKING:
    from agent.runtime import Runtime
    from agent.session import Session
    from agent.verifier import VerifiedFinding

err = Console(stderr=True)
# --fail-on-incomplete's exit status: not 1 (a finding at --fail-on's severity) nor 2 (a usage error),
# so a CI job can tell "found something" from "could not read everything".
INCOMPLETE_EXIT_CODE = 3


def fail(message: str, code: int = 2) -> typer.Exit:
    """One clear line on stderr, no traceback."""
    err.print(f"reviewloop: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _format(value: str) -> ReportFormat:
    if value not in REPORT_FORMATS:
        raise fail(f"unknown format {value!r}; choose one of {', '.join(REPORT_FORMATS)}")
    return value  # type: ignore[return-value]


def _extra_reports(values: Sequence[str]) -> list[tuple[ReportFormat, Path]]:
    """`--report FORMAT=PATH` values: more reports of the same review (a CI job writes Code Quality
    and SARIF from one run, not two runs that could disagree or pay a model twice)."""
    reports = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not path:
            raise fail(f"--report takes FORMAT=PATH, not {value!r}")
        reports.append((_format(name), Path(path)))
    return reports


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        output.write_text(text, encoding="utf-8")


@app.command()
def review(
    path: Annotated[Path | None, typer.Argument(help="a local git repository")] = None,
    base: Annotated[str | None, typer.Option(help="base revision (e.g. main)")] = None,
    head: Annotated[str | None, typer.Option(help="head revision (e.g. HEAD)")] = None,
    diff: Annotated[str | None, typer.Option(help="review a unified diff file instead ('-' = stdin)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table|json|markdown|sarif|codequality")] = "table",
    output: Annotated[Path | None, typer.Option(help="write the report to this file")] = None,
    reports: Annotated[
        list[str] | None,
        typer.Option("--report", help="also write FORMAT=PATH from the same review (repeatable)"),
    ] = None,
    fail_on: Annotated[str | None, typer.Option(help="exit 1 when a finding reaches this severity")] = None,
    fail_on_incomplete: Annotated[
        bool,
        typer.Option(
            "--fail-on-incomplete",
            help=f"exit {INCOMPLETE_EXIT_CODE} when a changed file was not analyzed in full (see not_reviewed)",
        ),
    ] = False,
    title: Annotated[str, typer.Option(help="title of the change")] = "",
    store: Annotated[
        bool | None,
        typer.Option(
            "--store/--no-store",
            help="record a local or diff review in Postgres; by default only when REVIEWLOOP_DATABASE_URL is set (a "
            "one-off review starts no database); a GitLab review is recorded with --post only",
        ),
    ] = None,
    all_verdicts: Annotated[bool, typer.Option("--all", help="also show false positives and duplicates")] = False,
    gitlab_url: Annotated[str | None, typer.Option(help="review a GitLab merge request on this instance")] = None,
    project: Annotated[str | None, typer.Option(help="GitLab project id or path (with --gitlab-url)")] = None,
    mr: Annotated[int | None, typer.Option(help="merge request IID (with --gitlab-url)")] = None,
    post: Annotated[bool, typer.Option(help="post the discussions and summary on the MR (with --gitlab-url)")] = False,
) -> None:
    """Review a local git range (PATH --base --head), a unified diff (--diff FILE|-), or a GitLab MR
    (--gitlab-url URL --project ID --mr IID [--post]; the token comes from REVIEWLOOP_GITLAB_TOKEN)."""
    report_format = _format(fmt)
    threshold = _severity_threshold(fail_on)
    extra_reports = _extra_reports(reports or [])
    if gitlab_url is not None:
        if extra_reports:
            raise fail("--report works with a local or --diff review; a GitLab review writes one --format")
        if not project or mr is None:
            raise fail("a GitLab review needs --project and --mr")
        verified, not_reviewed = _review_gitlab(
            gitlab_url,
            project,
            mr,
            post=post,
            store=store,
            fmt=report_format,
            output=output,
            include_all=all_verdicts,
        )
        _check_severity(verified, threshold)
        _check_complete(not_reviewed, fail_on_incomplete)
        return
    with _imports_outside_the_collector():
        if diff is not None:
            try:
                # bytes that are not UTF-8 become U+FFFD, and the reviewers name such files ("encoding")
                data = sys.stdin.buffer.read() if diff == "-" else Path(diff).read_bytes()
                text = data.decode("utf-8", errors="replace")
            except OSError as exc:
                raise fail(f"cannot read {diff}: {exc.strerror}") from exc
            _check_diff(text)
            _start_type_check_of_diff(text)
            request = ReviewRequest(source="diff", title=title, diff_text=text)
        elif path is not None:
            if not base or not head:
                raise fail("a local review needs --base and --head")
            request = ReviewRequest(source="local", title=title, repo_path=str(path), base=base, head=head)
            _start_analyzers(path, base, head)
        else:
            raise fail("give a repository PATH with --base/--head, or --diff FILE")
        from agent.pipeline import not_reviewed_of, outcome_meta  # after the analyzers started: see _start_analyzers

    settings = Settings()
    session = _open(settings) if _stores(store, settings) else None
    try:
        outcome = _run(settings, session, request)
    finally:
        if session is not None:
            session.close()
    meta: dict[str, Any] = {
        "review_id": outcome.review_id,
        "title": outcome.snapshot.title,
        "strategy_source": outcome.strategy_source,
        "strategy_text": outcome.strategy.render(),
        "not_reviewed": [n.model_dump() for n in not_reviewed_of(outcome)],
        **outcome_meta(outcome),
    }
    _emit(render_report(outcome.verified, fmt=report_format, meta=meta, include_all=all_verdicts), output)
    for extra_format, extra_path in extra_reports:
        _emit(render_report(outcome.verified, fmt=extra_format, meta=meta, include_all=all_verdicts), extra_path)
    if not outcome.snapshot.diff.strip():
        err.print("reviewloop: nothing to review: the change is empty", markup=False, highlight=False)
    _check_severity(outcome.verified, threshold)
    _check_complete(not_reviewed_of(outcome), fail_on_incomplete)


def _severity_threshold(fail_on: str | None) -> int | None:
    """--fail-on's rank, checked before any work in every mode (a typo must not pass a CI job)."""
    if fail_on is None:
        return None
    if fail_on not in SEVERITY_RANK:
        raise fail(f"unknown severity {fail_on!r} for --fail-on; choose one of {', '.join(SEVERITY_RANK)}")
    return SEVERITY_RANK[fail_on]  # type: ignore[index]


def _check_severity(verified: Sequence[VerifiedFinding], threshold: int | None) -> None:
    """With --fail-on, a shown finding at or above its severity exits 1."""
    if threshold is not None and any(SEVERITY_RANK[v.finding.severity] >= threshold for v in shown(verified)):
        raise typer.Exit(1)


def _stores(store: bool | None, settings: Settings) -> bool:
    """Whether a review is recorded: as --store/--no-store says, else only where a database is
    configured, so a one-off review on a laptop starts no embedded Postgres and leaves nothing running."""
    return store if store is not None else settings.database_url is not None


@contextmanager
def _imports_outside_the_collector() -> Iterator[None]:
    """The review runtime's imports with the cyclic collector off, and what they built frozen out of
    it afterwards (`gc.freeze`).

    One review, then the process ends: the modules, classes and functions imported (some 200,000
    objects) live until exit and are no garbage. The collector traversed all of them in every full
    collection, during the imports and the review, and again while the interpreter shut down: 0.5 to
    0.7 s of a cold 10,000-line review (bench.large_mr). The review's own objects are collected as
    before."""
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        gc.enable()


def _start_analyzers(path: Path, base: str, head: str) -> None:
    """Check the range, then start the analyzer processes (bandit, semgrep's engine) on the change's
    files before this process imports the review runtime: a cold command spends a second importing
    LangGraph and its tracing on one core, and the analyzers can use the other meanwhile. The review
    later finds their answers by text.

    A path that is no repository or a revision that does not exist is the user's mistake: one line
    and exit 2 here, before anything is stored (it used to show as a failed review on the dashboard).
    """
    from agent.diff import parse_unified_diff
    from agent.gitrepo import open_repository
    from reviewers.analyzers.early import start_analyzer_processes, start_type_check

    try:
        repo = open_repository(path)
        paths = repo.changed_paths(base, head)
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc
    try:
        workspace = repo.workspace(head)
        workspace.read_files(paths)
        files = [(p, text) for p in paths if (text := workspace.read_file(p)) is not None]
    except ReviewloopError:
        return  # left to the review, which says it properly
    start_analyzer_processes(files)
    try:  # mypy reads the base too: the diff, as the review will parse it (agent.loaders.load_local)
        start_type_check(parse_unified_diff(repo.diff(repo.resolve(base), repo.resolve(head))), workspace)
    except ReviewloopError:
        return


def _start_type_check_of_diff(text: str) -> None:
    """A bare diff's type check, started before the runtime's imports as `_start_analyzers` does (only
    files the diff shows whole are checked: `reviewers.analyzers.types.plan`)."""
    from agent.diff import parse_unified_diff
    from agent.workspaces.diff import DiffWorkspace
    from reviewers.analyzers.early import start_type_check

    files = parse_unified_diff(text)
    start_type_check(files, DiffWorkspace(files))


def _check_diff(text: str) -> None:
    """A diff that does not parse is the user's mistake: one line and exit 2, before anything is stored."""
    from agent.diff import parse_unified_diff

    try:
        parse_unified_diff(text)
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc


def _check_complete(not_reviewed: Sequence[NotReviewed], fail_on_incomplete: bool) -> None:
    """With --fail-on-incomplete, a review that did not analyze every changed file in full fails."""
    if fail_on_incomplete and not_reviewed:
        reasons = ", ".join(sorted({n.reason for n in not_reviewed}))
        err.print(
            f"reviewloop: incomplete review: {len(not_reviewed)} changed file(s) not analyzed in full ({reasons})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(INCOMPLETE_EXIT_CODE)


def _review_gitlab(
    url: str,
    project: str,
    mr_iid: int,
    *,
    post: bool,
    store: bool | None,
    fmt: ReportFormat,
    output: Path | None,
    include_all: bool,
) -> tuple[list[VerifiedFinding], list[NotReviewed]]:
    """Review (and with `post`, publish) one merge request; returns its findings and what it did not
    analyze in full. Posting needs the store (what was posted, for the next push); a dry run opens
    no database at all."""
    from agent.gitlab.client import GitLabPlatform
    from agent.gitlab.review import build_deps, load_gitlab_snapshot, review_gitlab_merge_request
    from agent.graph import verified_from_state
    from agent.pipeline import not_reviewed_of, outcome_meta, run_review
    from agent.runtime import Runtime
    from agent.session import llm_from_settings
    from agent.store import reviews as store_reviews

    settings = Settings(gitlab_url=url)
    if store is False and post:
        raise fail("--post records what it posts (the next push's review builds on it): it cannot run with --no-store")
    # a dry run is never stored: a stored review of this head would make a later --post (or the service)
    # take it as already reviewed
    session = _open(settings) if post else None
    extra: dict[str, Any] = {}  # a dry run's own outcome: the model's steps and the severity floor's count
    try:
        llm = llm_from_settings(settings)
        if post:
            assert session is not None
            deps = build_deps(settings, pool=session.pool, dsn=session.dsn, llm=llm)
            review_id = review_gitlab_merge_request(deps, project=project, mr_iid=mr_iid, head_sha=None)
            detail = store_reviews.get_review(session.pool, review_id)
            err.print(f"review #{review_id} posted on {project}!{mr_iid}", markup=False)
            verified = verified_from_state(
                {
                    "verdicts": [
                        {"finding": _finding_dict(f), "verdict": f["verdict"], "reason": f["verdict_reason"]}
                        for f in (detail["findings"] if detail else [])
                    ]
                }
            )
            title = detail["title"] if detail else ""
            stored = detail["not_reviewed"] if detail else []
            not_reviewed = [NotReviewed.model_validate(n) for n in stored or []]
        else:
            if settings.gitlab_token is None:
                raise fail("REVIEWLOOP_GITLAB_TOKEN must be set to review GitLab")
            platform = GitLabPlatform(url, settings.gitlab_token.get_secret_value())
            request = ReviewRequest(source="gitlab", project=project, mr_iid=mr_iid)

            def loader(req: ReviewRequest) -> Any:
                return load_gitlab_snapshot(platform, req, since_head=None)

            runtime = Runtime(pool=None, llm=llm, loaders={"gitlab": loader})
            outcome = run_review(runtime, request, dsn=None, review_id=0)
            verified, title = list(outcome.verified), outcome.snapshot.title
            not_reviewed = not_reviewed_of(outcome)
            extra = outcome_meta(outcome)
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc
    finally:
        if session is not None:
            session.close()
    meta = {"title": title, "not_reviewed": [n.model_dump() for n in not_reviewed], **extra}
    _emit(render_report(verified, fmt=fmt, meta=meta, include_all=include_all), output)
    return list(verified), not_reviewed


def _finding_dict(row: Any) -> dict[str, Any]:
    keys = (
        "path",
        "line",
        "end_line",
        "category",
        "severity",
        "title",
        "body",
        "evidence",
        "fingerprint",
        "reviewer",
        "rule",
    )
    return {k: row[k] for k in keys}


def _open(settings: Settings) -> Session:
    from agent.session import open_session

    try:
        return open_session(settings)
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc


def _run(settings: Settings, session: Session | None, request: ReviewRequest) -> Any:
    from agent.pipeline import run_review
    from agent.runtime import Runtime
    from agent.session import llm_from_settings, strategy_model_source

    try:
        llm = llm_from_settings(settings)
        source = strategy_model_source(settings, session.pool, llm) if session else None
        runtime = Runtime(
            pool=session.pool if session else None,
            llm=llm,
            strategy_model=source,
            shadow_strategies=settings.shadow_strategies if session else 0,
            review_deadline_s=settings.review_deadline_s,
            hold_by_track_record=settings.hold_by_track_record,
            posting=settings.posting,
        )
        with Progress(console=err, transient=True) as progress:
            progress.add_task("reviewing", total=None)
            return run_review(runtime, request, dsn=session.dsn if session else None)
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc


def load_cases(path: Path) -> list[dict[str, Any]]:
    cases = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            cases.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise fail(f"{path}:{n}: not JSON: {exc.msg}") from exc
    return cases


def evaluate_cases(cases: list[dict[str, Any]], runtime: Runtime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Review every case (from its diff and files at head) and score the REAL findings."""
    from agent.pipeline import run_review

    results: list[MatchResult] = []
    per_case = []
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("evaluating", total=len(cases))
        for case in cases:
            request = ReviewRequest(
                source="eval",
                title=case.get("title", ""),
                description=case.get("description", ""),
                diff_text=case["diff"],
                files=case.get("files") or None,
            )
            outcome = run_review(runtime, request, dsn=None, review_id=0)
            reported = [v.finding for v in outcome.verified if v.verdict == "REAL"]
            expected = [ExpectedFinding.model_validate(e) for e in case.get("expected", [])]
            negatives = [NegativeLine.model_validate(n) for n in case.get("negatives", [])]
            match = match_findings(reported, expected, negatives)
            results.append(match)
            per_case.append(
                {
                    "id": case.get("id"),
                    "tp": len(match.true_positives),
                    "fp": len(match.false_positives),
                    "fn": len(match.missed),
                }
            )
            progress.advance(task)
    return score_matches(results), per_case


@app.command("eval")
def eval_command(
    cases: Annotated[Path, typer.Option(help="labeled cases, one JSON object per line")],
    fmt: Annotated[str, typer.Option("--format", help="table|json")] = "table",
) -> None:
    """Precision, recall and F1 of the reviewer on labeled merge requests."""
    from agent.runtime import Runtime
    from agent.session import llm_from_settings

    settings = Settings()
    try:
        runtime = Runtime(
            pool=None,
            llm=llm_from_settings(settings),
            hold_by_track_record=settings.hold_by_track_record,
            posting=settings.posting,
        )
        scores, per_case = evaluate_cases(load_cases(cases), runtime)
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc
    if fmt == "json":
        _emit(json.dumps({**scores, "cases": per_case}, indent=2), None)
        return
    console = Console()
    overall = scores["overall"]
    console.print(
        f"overall  precision {overall['precision']:.2f}  recall {overall['recall']:.2f}  f1 {overall['f1']:.2f}"
    )
    for cat, s in scores["per_category"].items():
        console.print(f"{cat:13} precision {s['precision']:.2f}  recall {s['recall']:.2f}  f1 {s['f1']:.2f}")


def build_demo_repository(target: Path) -> tuple[str, str]:
    """Write the demo merge request as a git repository with a base and a head commit."""
    doc = json.loads(resources.files("agent.demo").joinpath("demo_mr.json").read_text(encoding="utf-8"))
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@example.invalid",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@example.invalid",
    }

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=target, env=env, check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def write(files: dict[str, str]) -> None:
        for rel, text in files.items():
            p = target / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")

    if not (target / ".git").exists():
        target.mkdir(parents=True, exist_ok=True)
        git("init", "-q", "-b", "main")
        write(doc["base_files"])
        git("add", "-A")
        git("commit", "-q", "-m", "inventory service")
        git("tag", "demo-base")
        write(doc["head_files"])
        git("add", "-A")
        git("commit", "-q", "-m", doc["title"])
        git("tag", "demo-head")
    return "demo-base", "demo-head"


@app.command()
def demo(
    fmt: Annotated[str, typer.Option("--format", help="table|json|markdown|sarif|codequality")] = "table",
) -> None:
    """Review the demo merge request that ships with reviewloop (uses the embedded Postgres)."""
    from agent.pipeline import not_reviewed_of

    report_format = _format(fmt)
    settings = Settings()
    repo = settings.data_dir / "demo-repo"
    base, head = build_demo_repository(repo)
    session = _open(settings)
    err.print(f"database: {session.dsn.split('?')[0]} (data dir {settings.data_dir})", markup=False)
    try:
        doc = json.loads(resources.files("agent.demo").joinpath("demo_mr.json").read_text(encoding="utf-8"))
        request = ReviewRequest(
            source="demo",
            title=doc["title"],
            description=doc["description"],
            repo_path=str(repo),
            base=base,
            head=head,
        )
        outcome = _run(settings, session, request)
    finally:
        session.close()
    meta = {
        "review_id": outcome.review_id,
        "title": outcome.snapshot.title,
        "strategy_text": outcome.strategy.render(),
        "not_reviewed": [n.model_dump() for n in not_reviewed_of(outcome)],
    }
    _emit(render_report(outcome.verified, fmt=report_format, meta=meta), None)
    if report_format == "table":
        _emit(
            f"strategy ({outcome.strategy_source}):\n{outcome.strategy.render()}\nreview #{outcome.review_id} stored.",
            None,
        )
    if settings.database_url is None:
        err.print(
            f"the embedded Postgres is still running (data in {settings.data_dir / 'postgres'}) so the next command "
            "starts fast; `reviewloop db status` shows it, `reviewloop db stop` stops it.",
            markup=False,
            highlight=False,
        )


SEVERITIES: tuple[Severity, ...] = ("info", "low", "medium", "high", "critical")
