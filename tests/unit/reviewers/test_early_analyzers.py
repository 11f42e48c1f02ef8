"""A review's analyzer processes start as soon as its changed files are known (issue 22's 10,000-line
review: a cold command line imports the runtime on one core while bandit's checks (ruff) and semgrep's
engine use the other), and the review then reads their answers instead of starting its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.gitrepo import open_repository
from api.cli import app
from reviewers.analyzers import bandit, ruff, semgrep_taint
from reviewers.analyzers.early import start_analyzer_processes

SHELL = "import subprocess\n\n\ndef run(p):\n    subprocess.run(f'gzip {p}', shell=True)\n"
HELPER = "def helper(x):\n    return x + 1\n"
TEST = "def test_helper():\n    assert helper(1) == 2\n"
JS = "const cp = require('child_process');\nfunction go(req) { cp.exec('ls ' + req.query.dir); }\n"


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def _repository(tmp_path: Path, tag: str) -> Path:
    """A base commit, and a head that adds product Python, a test, JavaScript, renames one file and
    deletes another."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "old.py").write_text(HELPER)
    (repo / "pkg" / "gone.py").write_text("X = 1\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "pkg" / "jobs.py").write_text(SHELL + f"# {tag}\n")
    (repo / "pkg" / "more.py").write_text(SHELL.replace("gzip", "bzip2") + f"# {tag}\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_helper.py").write_text(TEST + f"# {tag}\n")
    (repo / "web").mkdir()
    (repo / "web" / "ls.js").write_text(JS + f"// {tag}\n")
    _git(repo, "mv", "pkg/old.py", "pkg/renamed.py")
    _git(repo, "rm", "-q", "pkg/gone.py")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "head")
    return repo


def test_changed_paths_are_those_present_at_head(tmp_path: Path) -> None:
    repo = open_repository(_repository(tmp_path, "paths"))
    paths = repo.changed_paths("HEAD~1", "HEAD")
    assert sorted(paths) == ["pkg/jobs.py", "pkg/more.py", "pkg/renamed.py", "tests/test_helper.py", "web/ls.js"]


def test_the_early_start_hands_bandit_product_python_and_the_engine_its_languages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: dict[str, list[tuple[str, str]]] = {"bandit": [], "engine": []}
    monkeypatch.setattr(bandit, "prefetch", lambda files, background=False: sent["bandit"].extend(files))
    monkeypatch.setattr(
        semgrep_taint, "prefetch", lambda files, deadline=None, background=False: sent["engine"].extend(files)
    )
    import reviewers.analyzers.early as early

    monkeypatch.setattr(early, "bandit_prefetch", bandit.prefetch)
    monkeypatch.setattr(early, "engine_prefetch", semgrep_taint.prefetch)
    minified = "var a=" + "1+" * 3000 + "1;\n"  # machine-written: the analyzers do not read it in full
    start_analyzer_processes(
        [
            ("pkg/jobs.py", SHELL),
            ("tests/test_jobs.py", TEST),
            ("web/ls.js", JS),
            ("web/app.min.js", minified),
            ("README.md", "# hi\n"),
        ]
    )
    assert sent["bandit"] == [("pkg/jobs.py", SHELL)]
    assert sent["engine"] == [("web/ls.js", JS)]


def test_a_local_review_reads_the_answers_its_early_start_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch of bandit's checks and one engine run for the whole review, both started by the
    command line before the runtime was imported; the security reviewer's own prefetch finds nothing
    left."""
    for name in (
        "REVIEWLOOP_LLM_BASE_URL",
        "REVIEWLOOP_LLM_MODEL",
        "REVIEWLOOP_LLM_MODEL_PATH",
        "REVIEWLOOP_DATABASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    repo = _repository(tmp_path, f"early {tmp_path.name}")  # texts no other test has analysed
    batches: list[int] = []  # batches of bandit's checks
    real_batch = ruff._ruff_batch

    def counted_batch(keys: Any, flags: tuple[str, ...]) -> Any:
        if flags == bandit.BANDIT_RULES.flags():
            batches.append(len(keys))
        return real_batch(keys, flags)

    monkeypatch.setattr(ruff, "_ruff_batch", counted_batch)
    scans: list[int] = []
    real_scan = semgrep_taint.scan
    monkeypatch.setattr(semgrep_taint, "scan", lambda files, **kw: scans.append(len(files)) or real_scan(files, **kw))

    real_single = ruff._ruff_single

    def no_single_run(text: str, path: str, flags: tuple[str, ...] = ruff.CODE_QUALITY_RULES.flags()) -> str:
        if flags == bandit.BANDIT_RULES.flags():
            raise AssertionError(f"{path} was run through bandit's checks alone")
        return real_single(text, path, flags)

    monkeypatch.setattr(ruff, "_ruff_single", no_single_run)
    import api.commands.review as review_command

    real_run = review_command._run
    started_before_the_review: list[bool] = []

    def run(*args: object, **kwargs: object) -> object:
        product = ("pkg/jobs.py", "pkg/more.py", "pkg/renamed.py")
        keys = [ruff._key((repo / p).read_text(), p, bandit.BANDIT_RULES) for p in product]
        started_before_the_review.append(not ruff._prefetched.missing(keys))
        return real_run(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(review_command, "_run", run)
    result = CliRunner().invoke(
        app, ["review", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--no-store", "--format", "json"]
    )
    assert result.exit_code in (0, 1), result.output
    assert started_before_the_review == [True]
    assert batches == [3]  # jobs.py, more.py, renamed.py; the test file is read for secrets only
    assert scans == [1]  # ls.js
    assert '"pkg/jobs.py"' in result.stdout and '"web/ls.js"' in result.stdout  # both answers were used
