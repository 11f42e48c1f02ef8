"""A batch bandit run gives each file the same report as its own run, in one process."""

from __future__ import annotations

import json
import threading

import pytest

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
        assert _key(text) in bandit._prefetched
        assert _ids(bandit._prefetched[_key(text)]) == _ids(bandit._bandit_single(text, "x.py"))
    assert any(tid == "B602" for tid, _ in _ids(bandit._prefetched[_key(texts[1])]))  # B608 is skipped: ours
    assert _ids(bandit._prefetched[_key(texts[2])]) == []


def _key(text: str) -> str:
    return bandit._digest(text)


def test_an_unparsable_file_is_left_to_its_own_run_and_the_others_keep_their_reports() -> None:
    """Issue 21: every changed file reaches the prefetch now, so one file bandit cannot parse must not
    send all the others to a process each."""
    texts = ["def broken(:\n", SQL + "# second batch\n"]
    bandit.prefetch(texts)
    assert _key(texts[0]) not in bandit._prefetched
    assert _ids(bandit._prefetched[_key(texts[1])]) == _ids(bandit._bandit_single(texts[1], "x.py"))


def test_a_large_prefetch_splits_over_processes_with_the_same_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bandit.os, "cpu_count", lambda: 4)  # three cores to spare: the batch splits
    batches: list[int] = []
    real_batch = bandit._bandit_batch
    monkeypatch.setattr(bandit, "_bandit_batch", lambda texts: batches.append(len(texts)) or real_batch(texts))
    texts = [f"{SHELL}# many {i}\n" for i in range(2 * bandit.MIN_FILES_PER_PROCESS)]
    bandit.prefetch(texts)
    assert len(batches) == 2
    assert all(_ids(bandit._prefetched[_key(t)]) == _ids(bandit._bandit_single(t, "x.py")) for t in texts)


def test_a_prefetch_in_the_background_is_waited_for_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [SQL + "# background\n", SHELL + "# background\n"]
    release = threading.Event()
    real_batch = bandit._bandit_batch

    def slow_batch(batch: list[str]) -> dict[str, str]:
        release.wait(10)
        return real_batch(batch)

    monkeypatch.setattr(bandit, "_bandit_batch", slow_batch)
    bandit.prefetch(texts, background=True)  # returns at once; the batch waits for `release`
    assert _key(texts[1]) not in bandit._prefetched

    def no_single_run(text: str, path: str) -> str:
        raise AssertionError("a file the batch covers was run alone")

    monkeypatch.setattr(bandit, "_bandit_single", no_single_run)
    threading.Timer(0.2, release.set).start()
    assert any(tid == "B602" for tid, _ in _ids(bandit._bandit_stdout(texts[1], "x.py")))
