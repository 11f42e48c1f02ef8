"""`bench.slips_history` on a small git repository: each commit reviewed by issue 39's rules alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.slips_history import scan


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_scan_reports_the_commit_that_wrote_the_slip(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "dev@example.org")
    git(tmp_path, "config", "user.name", "Dev")
    module = tmp_path / "app.py"
    for text in ('TYPES = ["a/b"]\n', 'TYPES = ["a/b"]\nMORE = ["c/d" "e/f"]\n'):
        module.write_text(text, encoding="utf-8")
        git(tmp_path, "add", "-A")
        git(tmp_path, "commit", "-q", "-m", "change")
    found = scan(tmp_path, 5)  # the root commit has no parent: reviewed commits are those with one
    assert found["commits"] == 1 and found["changed_lines"] >= 1
    assert [(h["path"], h["line"], h["rule"]) for h in found["hits"]] == [("app.py", 2, "slips:missing-comma")]
