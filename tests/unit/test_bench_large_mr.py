"""The 10,000-line merge request benchmark: a change of real code in every language the analyzers
read, and the arithmetic of its stage table."""

from __future__ import annotations

import ast
from pathlib import Path

from bench.large_mr import TARGET_LINES, _command_kind, _span, build_change, change_files


def test_the_change_is_ten_thousand_lines_of_real_code_in_four_languages_and_more() -> None:
    files = change_files()
    lines = sum(len(t.splitlines()) for t in files.values())
    assert TARGET_LINES - 200 <= lines <= TARGET_LINES
    suffixes = {Path(p).suffix for p in files}
    assert {".py", ".js", ".go", ".java", ".ts"} <= suffixes
    for path, text in files.items():
        if path.endswith(".py"):
            ast.parse(text)  # installed library code: it parses, and the analyzers read all of it
    assert sum(len(t.splitlines()) for p, t in files.items() if not p.endswith(".py")) >= 1000


def test_the_change_is_one_commit_over_a_base(tmp_path: Path) -> None:
    change = build_change(tmp_path / "repo", target_lines=2500)  # the other languages, then Python to fill
    assert change.base != change.head and 2000 < change.lines() <= 2500 and change.lines(".py") > 0
    assert (tmp_path / "repo" / next(iter(change.files))).is_file()


def test_process_kinds_and_the_wall_they_cover() -> None:
    assert _command_kind(["/venv/bin/semgrep-core", "-json"]) == "semgrep-core"
    assert _command_kind(["/venv/bin/python", "-m", "ruff", "check"]) == "ruff"
    assert _command_kind(["git", "--no-pager", "cat-file"]) == "git"
    assert _span([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0  # two side by side count once
    assert _span([]) == 0.0
