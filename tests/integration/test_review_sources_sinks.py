"""`reviewloop review` on a local range reports the sources and sinks of issue 39 (item 3).

Each case is one of the own security suite's (`tests/fixtures/security/python/<class>/`): a merge
request adds it to a repository that already holds the case's other modules, and the review must
report the class's CWE on the vulnerable file and not on its safe near miss. Request data arriving
through a plain `http.server` handler or a tornado handler and reaching an injection sink is posted
(REAL), not listed for a person. Before this change (2a83aab) none of the vulnerable cases here was
reported: tornado, http.server, gradio and streamlit inputs were no sources; archive member names,
HTTP client objects, http.client/pycurl headers, git's command wrappers, JavaScript evaluators,
`numpy.load(allow_pickle=True)` and lxml < 5's default parser were no sinks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app
from bench.security_suite import CLASS_CWES, SUITE

# (class folder, vulnerable case, its safe near miss)
PAIRS = [
    ("redirect", "vuln_12", "safe_12"),  # tornado self.redirect(self.get_argument(...))
    ("redirect", "vuln_13", "safe_13"),  # http.server Location header from self.path
    ("xss", "vuln_11", "safe_11"),  # tornado self.write of raw HTML
    ("path", "vuln_15", "safe_15"),  # zip slip: namelist() into a join + open
    ("path", "vuln_16", "safe_16"),  # tar slip: getmembers() .name
    ("path", "vuln_17", "safe_17"),  # infolist() .filename into a Path
    ("path", "vuln_18", "safe_18"),  # http.server self.path into open
    ("path", "vuln_20", "safe_19"),  # a gradio function's input
    ("command", "vuln_13", "safe_13"),  # http.server query into a shell
    ("command", "vuln_14", "safe_14"),  # streamlit text_input into a shell
    ("command", "vuln_15", "safe_15"),  # repo.git.checkout(request value)
    ("command", "vuln_16", "safe_16"),  # Git().execute([...])
    ("command", "vuln_17", "safe_17"),  # Repo.clone_from(request url)
    ("code", "vuln_12", "safe_12"),  # js2py.eval_js
    ("code", "vuln_13", "safe_13"),  # execjs.eval
    ("code", "vuln_14", "safe_14"),  # MiniRacer().eval
    ("deserialization", "vuln_12", "safe_12"),  # numpy.load(allow_pickle=True)
    ("deserialization", "vuln_13", "safe_13"),  # tornado self.request.body into pickle
    ("ssrf", "vuln_03", "safe_03"),  # the project's own HTTP client class (requests.Session)
    ("ssrf", "vuln_04", "safe_04"),  # httpx.AsyncClient
    ("ssrf", "vuln_05", "safe_05"),  # aiohttp.ClientSession
    ("ssrf", "vuln_06", "safe_06"),  # pycurl setopt(URL)
    ("ssrf", "vuln_07", "safe_07"),  # http.client.HTTPSConnection(host)
    ("ssrf", "vuln_08", "safe_08"),  # gradio .click(fn, ...)
    ("ssrf", "vuln_09", "safe_09"),  # streamlit text_input
    ("ssrf", "vuln_10", "safe_10"),  # tornado get_argument
    ("ssrf", "vuln_11", "safe_11"),  # a wrapper module that opens its parameter
    ("header", "vuln_01", "safe_01"),  # http.client putheader
    ("header", "vuln_02", "safe_02"),  # http.client putrequest
    ("header", "vuln_03", "safe_03"),  # pycurl HTTPHEADER
    ("header", "vuln_04", "safe_04"),  # http.server send_header
    ("header", "vuln_07", "safe_07"),  # a wrapper that calls putheader with its parameter
]
# Request data into an injection sink through a handler the route decorators do not show: posted.
POSTED = {("command", "vuln_13"), ("command", "vuln_14"), ("deserialization", "vuln_13"), ("code", "vuln_12")}


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _case_files(cls: str, name: str) -> tuple[dict[str, str], str]:
    """(the case's other files, its changed file's text)."""
    single = SUITE / cls / f"{name}.py"
    if single.is_file():
        return {}, single.read_text()
    folder = SUITE / cls / name
    others = {p.name: p.read_text() for p in folder.iterdir() if p.is_file() and p.name != "app.py"}
    return others, (folder / "app.py").read_text()


def _review(repo: Path, base: dict[str, str], head: dict[str, str]) -> list[dict[str, Any]]:
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "dev@example.invalid")
    _git(repo, "config", "user.name", "dev")
    for path, text in {"README.md": "cases\n", **base}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "tag", "base")
    for path, text in head.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "head")
    result = CliRunner().invoke(app, ["review", str(repo), "--base", "base", "--head", "HEAD", "--format", "json"])
    assert result.exit_code == 0, result.output
    findings: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return findings


def test_the_new_sources_and_sinks_are_reported_and_their_near_misses_are_not(env: None, tmp_path: Path) -> None:
    base: dict[str, str] = {}
    head: dict[str, str] = {}
    for cls, *names in PAIRS:
        for name in names:
            others, text = _case_files(cls, name)
            folder = f"cases/{cls}_{name}"
            base.update({f"{folder}/{path}": body for path, body in others.items()})
            head[f"{folder}/app.py"] = text
    findings = _review(tmp_path / "repo", base, head)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        if f["rule"].startswith("python:"):  # the taint engine's, not bandit's pattern rules
            by_file.setdefault(f["path"], []).append(f)
    missed, false_alarms, listed = [], [], []
    for cls, vulnerable, safe in PAIRS:
        wanted = CLASS_CWES[cls]
        hits = [f for f in by_file.get(f"cases/{cls}_{vulnerable}/app.py", []) if f["cwe"] in wanted]
        if not hits:
            missed.append(f"{cls}/{vulnerable}")
        elif (cls, vulnerable) in POSTED and not any(f["verdict"] == "REAL" for f in hits):
            listed.append(f"{cls}/{vulnerable}: {[f['verdict_reason'] for f in hits]}")
        alarms = [f for f in by_file.get(f"cases/{cls}_{safe}/app.py", []) if f["cwe"] in wanted]
        if alarms:
            false_alarms.append(f"{cls}/{safe}: {[f['title'] for f in alarms]}")
    assert missed == []
    assert false_alarms == []
    assert listed == []


def test_lxml_default_parser_is_an_xxe_sink_only_where_the_project_pins_lxml_below_5(env: None, tmp_path: Path) -> None:
    for case, expected in (("vuln_11", True), ("safe_11", False), ("vuln_12", True), ("safe_12", False)):
        others, text = _case_files("xxe", case)
        findings = _review(tmp_path / case, others, {"app.py": text})
        found = [f for f in findings if f["cwe"] == "CWE-611" and f["path"] == "app.py"]
        assert bool(found) is expected, (case, found)
