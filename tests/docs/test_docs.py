"""The README is a front door and the docs site builds clean; every command either shows is run (issue 42).

Commands are the lines of the fenced `sh`/`bash`/`console` blocks in README.md and docs/*.md. Each
runs, in the order written, in a fresh workspace (a git repository with a change for `path/to/repo`,
its diff for `change.patch`, a fresh database, a GitLab fake over real HTTP for `--gitlab-url`), and
must exit with a status the docs give it (0; 1 for a finding at `--fail-on`; 3 for an incomplete review)
with no traceback. `export` lines set the environment of the page's later commands. What cannot run
here is listed in EXEMPT with the reason and where it is exercised instead.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.reporter import DOCS_URL
from api.commands.review import build_demo_repository

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
MAX_README_LINES = 120
DOCUMENTED_EXITS = {0, 1, 3}
BLOCK = re.compile(r"```(?:sh|bash|console)\n(.*?)```", re.DOTALL)
# (pattern on the command, why it does not run here and what runs it instead)
EXEMPT: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^make test$"), "the suite itself: .ci/run runs it first"),
    (
        re.compile(r"^make run$"),
        "sets up .venv from scratch: scripts/check_readme_commands.py runs it in CI in the fresh clone",
    ),
    (
        re.compile(r"^(cd deploy && )?(docker|cp env\.example)"),
        "no Docker engine here: tests/deploy parse compose.yaml and the Dockerfiles, hadolint lints them",
    ),
    (re.compile(r"reviewloop serve\b"), "runs until stopped: tests/integration serve the same app over HTTP"),
    (re.compile(r"^vllm serve "), "needs a GPU and a model download"),
    (
        re.compile(r"^(python3 -m venv review-env|review-env/)"),
        "a fresh install takes minutes: scripts/check_plain_install.sh runs the same install and review in CI",
    ),
    (
        re.compile(r"^reviewloop (train |eval-model |models (promote|rollback))"),
        "trains or compares models on placeholders (PATH, V, W): tests/learning run them on a tiny model",
    ),
    (
        re.compile(r"^(export REVIEWLOOP_LLM_MODEL_PATH=|reviewloop review --diff change\.patch$)"),
        "the in-process base model (hundreds of MB; minutes per review on 2 cores): tests/learning use it",
    ),
)


@dataclass(frozen=True)
class Command:
    page: str
    line: str


def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def commands_of(path: Path) -> list[Command]:
    found = []
    for block in BLOCK.findall(path.read_text(encoding="utf-8")):
        for raw in block.splitlines():
            line = raw.split("  #", 1)[0].strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                found.append(Command(path.name, line))
    return found


def exemption(command: str) -> str | None:
    return next((why for pattern, why in EXEMPT if pattern.search(command)), None)


def test_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES, f"README.md has {len(text.splitlines())} lines"
    for heading in ("## The two commands", "## Three ways to run it", "From the command line", "In GitLab CI"):
        assert heading in text, heading
    assert "As a service" in text
    assert {c.line for c in commands_of(README)} >= {"make run", "make test"}
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (REPO_ROOT / target).is_file(), f"README links to {target}, which does not exist"


def test_nothing_the_old_readme_said_was_lost() -> None:
    """README internals moved to the docs: what an operator or contributor looks up is still written."""
    everything = "\n".join(p.read_text(encoding="utf-8") for p in doc_pages())
    for needle in (
        "REVIEWLOOP_TEST_DATABASE_URL",
        "agent/verdicts/track_record.json",
        "REVIEWLOOP_HOLD_BY_TRACK_RECORD=false",
        "REVIEWLOOP_POSTING=all",
        "agent/verdicts/convention.py",
        "--fail-on-incomplete",
        "reviewloop reviews retry EVENT_ID",
        "reviewloop tokens create NAME",
        "REVIEWLOOP_LLM_CONTEXT_TOKENS",
        "reviewloop dev make-env",
        "accelerate launch --multi_gpu",
        "make bench-headroom",
        "python -m bench.history --mirrors DIR",
        "agent/store/migrations/",
        "`vendored`",
        "security:prompt-injection",
    ):
        assert needle in everything, f"the docs lost {needle!r}"


def test_the_docs_cover_what_a_newcomer_asked_for() -> None:
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    for option in ("--no-store", "--store", "--all", "--gitlab-url", "--post", "--report"):
        assert f"`{option}" in cli, option
    retraining = (DOCS / "retraining.md").read_text(encoding="utf-8")
    assert "--base-model" in retraining and "skipped" in retraining


def test_the_docs_url_is_one_address() -> None:
    mkdocs = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert mkdocs["site_url"] == pyproject["project"]["urls"]["Documentation"] == DOCS_URL
    nav_pages = {next(iter(item.values())) for item in mkdocs["nav"]}
    assert nav_pages == {p.name for p in DOCS.glob("*.md")}, "every page is in the nav, and only pages"


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_docs_build_strict_with_no_warning(tmp_path: Path) -> None:
    done = _mkdocs(REPO_ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "ci" / "index.html").is_file()
    # the strict build can fail: the same docs with one broken link do
    copy = tmp_path / "copy"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(REPO_ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    with (copy / "docs" / "cli.md").open("a", encoding="utf-8") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    broken = _mkdocs(copy / "mkdocs.yml", tmp_path / "broken-site")
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr


def test_the_exemptions_stay_few_and_each_is_used() -> None:
    every = [c.line for p in doc_pages() for c in commands_of(p)]
    assert len(EXEMPT) <= 8
    for pattern, why in EXEMPT:
        assert any(pattern.search(line) for line in every), f"unused exemption ({why}): drop it"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """What the docs' placeholders name: a repository whose `main` is the base of the change checked
    out, the change as a patch, and the examples the docs point at."""
    repo = tmp_path / "repo"
    base, head = build_demo_repository(repo)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout

    git("checkout", "-q", "-b", "feature", head)
    git("branch", "-f", "main", base)
    (tmp_path / "change.patch").write_text(git("diff", base, head), encoding="utf-8")
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    return tmp_path


@pytest.mark.slow  # about two minutes: a dozen reviews and a retrain that imports torch
def test_every_command_in_the_readme_and_docs_runs(db_dsn: str, workspace: Path) -> None:
    bin_dir = Path(sys.executable).parent
    base_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("REVIEWLOOP_")},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),  # this checkout, as the editable install points at it
        "REVIEWLOOP_DATABASE_URL": db_dsn,
        "REVIEWLOOP_DATA_DIR": str(workspace / "data"),
    }
    ran, failures = 0, []
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "group/app")
        repo = workspace / "repo"
        files_base = {"inventory/db.py": _show(repo, "main", "inventory/db.py")}
        files_head = {"inventory/db.py": _show(repo, "feature", "inventory/db.py")}
        gitlab.add_merge_request(42, 7, files_base=files_base, files_head=files_head, title="Find items")
        fill = {
            ".venv/bin/reviewloop": str(bin_dir / "reviewloop"),
            "path/to/repo": str(repo),
            "https://gitlab.example.com": gitlab.url,
            "glpat-...": BOT_TOKEN,
        }
        for page in doc_pages():
            env = dict(base_env)
            for command in commands_of(page):
                line = command.line
                for placeholder, value in fill.items():
                    line = line.replace(placeholder, value)
                if exemption(command.line):
                    continue
                if line.startswith("export "):
                    assignments = shlex.split(line)[1:]
                    assert all("=" in a for a in assignments), f"{page.name}: an export to fill in: {line}"
                    env.update(dict(a.split("=", 1) for a in assignments))
                    continue
                done = subprocess.run(
                    ["bash", "-c", line], cwd=workspace, env=env, capture_output=True, text=True, timeout=600
                )
                ran += 1
                output = done.stdout + done.stderr
                if done.returncode not in DOCUMENTED_EXITS or "Traceback" in output:
                    failures.append(f"{page.name}: exit {done.returncode}: {command.line}\n{output[-2000:]}")
        assert gitlab.discussions(42, 7), "the docs' `--post` posted nothing on the merge request"
    assert not failures, "\n\n".join(failures)
    assert ran >= 12, f"only {ran} commands ran"


def _show(repo: Path, rev: str, path: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], capture_output=True, text=True, check=True)
    return done.stdout
