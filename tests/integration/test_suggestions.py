"""Fixes in one click: a finding whose fix is exact (ruff's safe fix) carries a GitLab suggestion block
that applies cleanly at head on the lines the change added; a finding without a sure fix carries none."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from typer.testing import CliRunner

from api.cli import app

BASE = {"app/util.py": "def first(items):\n    return items[0]\n"}
HEAD = {
    "app/util.py": (
        "import os\n"
        "import json\n"
        "\n"
        "\n"
        "def first(items):\n"
        "    return items[0]\n"
        "\n"
        "\n"
        "def dump(value):\n"
        "    if value == None:\n"
        "        return json.dumps({})\n"
        "    return json.dumps(value)\n"
    )
}
BLOCK = re.compile(r"(`{3,})suggestion:-(\d+)\+(\d+)\n(.*?)\1", re.S)


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("REVIEWLOOP_GITLAB_TOKEN", BOT_TOKEN)
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def apply_suggestion(text: str, *, line: int, above: int, below: int, content: str) -> str:
    """What GitLab's "Apply suggestion" does: lines line-above..line+below become the block's content."""
    lines = text.split("\n")
    start, end = line - above, line + below  # 1-based, inclusive
    return "\n".join([*lines[: start - 1], *content.split("\n")[:-1], *lines[end:]])


def ruff_codes(text: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F,E711", "--output-format", "json",
         "--stdin-filename", "app/util.py", "-"],
        input=text, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return {d["code"] for d in json.loads(done.stdout)}


def test_an_unused_import_gets_a_suggestion_that_applies_cleanly(env: None) -> None:
    assert {"F401", "E711"} <= ruff_codes(HEAD["app/util.py"])
    with FakeGitLab() as gitlab:
        gitlab.add_project(1, "shop/app")
        gitlab.add_merge_request(1, 4, files_base=BASE, files_head=HEAD, title="Dump values")
        args = ["review", "--gitlab-url", gitlab.url, "--project", "1", "--mr", "4", "--post", "--format", "json"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        threads = [d for d in gitlab.discussions(1, 4) if d.notes[0].position is not None]
    by_rule = {}
    for thread in threads:
        note = thread.notes[0]
        rule = re.search(r"`ruff:(\w+)`", note.body)
        if rule:
            by_rule[rule.group(1)] = note
    assert {"F401", "E711"} <= set(by_rule), sorted(by_rule)

    unused = by_rule["F401"]
    [(_, above, below, content)] = BLOCK.findall(unused.body)
    line = int(unused.position["new_line"])
    assert line == 1 and unused.position["new_path"] == "app/util.py"
    fixed = apply_suggestion(HEAD["app/util.py"], line=line, above=int(above), below=int(below), content=content)
    assert "F401" not in ruff_codes(fixed)  # the file is clean of it once the suggestion is applied
    assert fixed == HEAD["app/util.py"].replace("import os\n", "", 1)  # and nothing else changed

    # `== None` -> `is None` can change behaviour (a custom __eq__): ruff calls it unsafe, so no block
    assert not BLOCK.search(by_rule["E711"].body)
