"""Rebuild `cases.jsonl`, the sample labeled merge requests `reviewloop eval` runs on in a fresh clone.

Each case is written here as base and head files; the diff is computed with git so it is exactly what
a merge request shows. Run: `python examples/make_cases.py` (needs only git).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

UPLOADS_BASE = """from flask import Flask, request, send_file

app = Flask(__name__)


@app.get("/health")
def health():
    return {"ok": True}
"""

UPLOADS_HEAD = (
    UPLOADS_BASE
    + """

@app.post("/thumbnail")
def thumbnail():
    size = request.form["size"]
    source = request.form["source"]
    subprocess.run(f"convert {source} -resize {size} /tmp/thumb.png", shell=True, check=True)
    return send_file("/tmp/thumb.png")
"""
).replace("from flask import", "import subprocess\n\nfrom flask import")

LEDGER_BASE = """import sqlite3

from flask import Flask

app = Flask(__name__)


def open_ledger(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path)
"""

LEDGER_HEAD = (
    LEDGER_BASE
    + '''

@app.get("/entries")
def entries() -> list[tuple[int, float]]:
    """Ledger entries of the account the request names, oldest first."""
    account = request.args["account"]
    sql = "SELECT id, amount FROM entries WHERE account = '%s' ORDER BY id" % account
    return open_ledger("ledger.db").execute(sql).fetchall()
'''
).replace("from flask import Flask", "from flask import Flask, request")

UNITS_BASE = '''"""Unit conversions used by the report module."""


def celsius_to_fahrenheit(value: float) -> float:
    return value * 9 / 5 + 32
'''

UNITS_HEAD = (
    UNITS_BASE
    + """

def fahrenheit_to_celsius(value: float) -> float:
    return (value - 32) * 5 / 9
"""
)

UNITS_TEST_BASE = """from units import celsius_to_fahrenheit


def test_boiling_point():
    assert celsius_to_fahrenheit(100) == 212
"""

UNITS_TEST_HEAD = """from units import celsius_to_fahrenheit, fahrenheit_to_celsius


def test_boiling_point():
    assert celsius_to_fahrenheit(100) == 212


def test_round_trip():
    assert fahrenheit_to_celsius(celsius_to_fahrenheit(37.0)) == 37.0
"""

CASES: list[dict[str, Any]] = [
    {
        "id": "sample-shell-from-form",
        "title": "Thumbnails for uploaded pictures",
        "description": "Resize a picture on request.",
        "base_files": {"web/uploads.py": UPLOADS_BASE},
        "files": {"web/uploads.py": UPLOADS_HEAD},
        "expected": [
            {
                "path": "web/uploads.py",
                "line": 17,
                "category": "security",
                "description": "form fields reach a shell command (shell=True): command injection",
            },
            {
                "path": "web/uploads.py",
                "line": 18,
                "category": "security",
                "description": "one fixed file in /tmp shared by every request: a race and a symlink target",
            },
        ],
        "negatives": [{"path": "web/uploads.py", "line": 10, "note": "a constant health answer"}],
    },
    {
        "id": "sample-sql-percent",
        "title": "List ledger entries of an account",
        "description": "The statement page needs the entries.",
        "base_files": {"ledger/store.py": LEDGER_BASE},
        "files": {"ledger/store.py": LEDGER_HEAD},
        "expected": [
            {
                "path": "ledger/store.py",
                "line": 16,
                "category": "security",
                "description": "the account from the request is formatted into the SQL text; use a bound parameter",
            }
        ],
        "negatives": [],
    },
    {
        "id": "sample-clean-conversion",
        "title": "Add the reverse temperature conversion",
        "description": "With a round-trip test.",
        "base_files": {"units.py": UNITS_BASE, "tests/test_units.py": UNITS_TEST_BASE},
        "files": {"units.py": UNITS_HEAD, "tests/test_units.py": UNITS_TEST_HEAD},
        "expected": [],
        "negatives": [
            {"path": "units.py", "line": 9, "note": "a correct, tested pure function"},
            {"path": "tests/test_units.py", "line": 9, "note": "the new test itself"},
        ],
    },
]


def git_diff(base: dict[str, str], head: dict[str, str]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)

        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout

        git("init", "-q")
        git("config", "user.email", "cases@example.invalid")
        git("config", "user.name", "cases")
        for files in (base, head):
            for path, text in files.items():
                (repo / path).parent.mkdir(parents=True, exist_ok=True)
                (repo / path).write_text(text, encoding="utf-8")
            git("add", "-A")
            git("commit", "-q", "--allow-empty", "-m", "state")
        return git("diff", "-M", "HEAD~1", "HEAD")


def main() -> None:
    lines = []
    for case in CASES:
        full = {**case, "diff": git_diff(case["base_files"], case["files"])}
        lines.append(json.dumps(full, sort_keys=True))
    (HERE / "cases.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
