"""A batch bandit run gives each file the same report as its own run, in one process."""

from __future__ import annotations

import json

from reviewers.analyzers import bandit

SQL = "import sqlite3\n\n\ndef f(c, name):\n    return c.execute(f\"SELECT * FROM t WHERE n = '{name}'\")\n"
SHELL = "import subprocess\n\n\ndef g(p):\n    subprocess.run(f'gzip {p}', shell=True)\n"
CLEAN = "def h(x):\n    return x + 1\n"


def _ids(report: str) -> list[tuple[str, int]]:
    return sorted((r["test_id"], r["line_number"]) for r in json.loads(report)["results"])


def test_prefetched_reports_equal_single_runs() -> None:
    texts = [SQL + "# batch\n", SHELL + "# batch\n", CLEAN + "# batch\n"]
    bandit.prefetch(texts)
    for text in texts:
        assert text in bandit._prefetched
        assert _ids(bandit._prefetched[text]) == _ids(bandit._bandit_single(text, "x.py"))
    assert any(tid == "B602" for tid, _ in _ids(bandit._prefetched[texts[1]]))  # B608 is skipped: ours
    assert _ids(bandit._prefetched[texts[2]]) == []


def test_a_batch_with_an_unparsable_file_is_left_to_single_runs() -> None:
    texts = ["def broken(:\n", SQL + "# second batch\n"]
    bandit.prefetch(texts)
    assert all(t not in bandit._prefetched for t in texts)
