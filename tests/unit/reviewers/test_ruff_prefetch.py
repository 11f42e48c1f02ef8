"""A batch ruff run gives each file the same diagnostics as its own run, in one process."""

from __future__ import annotations

import json

from reviewers.analyzers import ruff

MUTABLE = "def f(seen=[]):\n    return seen\n"
BARE = "def g(job):\n    try:\n        job()\n    except:\n        pass\n"
UNUSED = "import os\n"
CLEAN = "def h(x):\n    return x + 1\n"


def _codes(answer: str) -> list[tuple[str, int]]:
    return sorted((d["code"] or "", d["location"]["row"]) for d in json.loads(answer))


def test_prefetched_diagnostics_equal_single_runs() -> None:
    files = [
        ("pkg/a.py", MUTABLE + "# batch\n"),
        ("pkg/b.py", BARE + "# batch\n"),
        ("pkg/__init__.py", UNUSED + "# batch\n"),  # same text, other name: keyed apart
        ("other/c.py", UNUSED + "# batch\n"),
        ("pkg/d.py", CLEAN + "# batch\n"),
    ]
    ruff.prefetch(files)
    for path, text in files:
        key = ruff._key(text, path)
        assert key in ruff._prefetched, path
        assert _codes(ruff._prefetched[key]) == _codes(ruff._ruff_single(text, path)), path
    assert ("B006", 1) in _codes(ruff._prefetched[ruff._key(*files[0][::-1])])
    assert ("E722", 4) in _codes(ruff._prefetched[ruff._key(*files[1][::-1])])
    assert ("F401", 1) in _codes(ruff._prefetched[ruff._key(*files[3][::-1])])
    assert _codes(ruff._prefetched[ruff._key(*files[4][::-1])]) == []
    # a later review of the same texts reads the batch's answer (no new ruff process)
    assert ruff._ruff_stdout(files[0][1], "elsewhere/a.py") == ruff._prefetched[ruff._key(*files[0][::-1])]


def test_a_syntax_error_stays_with_its_own_file() -> None:
    files = [("x/broken.py", "def broken(:\n"), ("x/fine.py", MUTABLE + "# second batch\n")]
    ruff.prefetch(files)
    broken = _codes(ruff._prefetched[ruff._key("def broken(:\n", "x/broken.py")])
    assert broken and all(code == "invalid-syntax" for code, _ in broken)
    assert [c for c, _ in _codes(ruff._prefetched[ruff._key(*files[1][::-1])])] == ["B006"]


def test_files_ruff_would_not_read_by_name_are_left_to_single_runs() -> None:
    files = [("bin/tool", MUTABLE + "# no suffix\n"), ("bin/other", BARE + "# no suffix\n")]
    ruff.prefetch(files)
    assert all(ruff._key(text, path) not in ruff._prefetched for path, text in files)
