"""bandit's checks as ruff runs them: the findings bandit itself gave (its ids, lines, grading, CWE,
suppressions), and one ruff process for a whole review's files.

The expected findings below are what bandit 1.9.4 reported on this text (with the review's skip
list), recorded when the checks moved to ruff; the checks ruff lacks (B614, B703) are the only ones
that differ there, and the module's docstring names them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from reviewers.analyzers import bandit, ruff
from reviewers.analyzers.bandit import BANDIT_RULES, bandit_issues
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.kernel.contracts import FileChange

GRADED = """import os, subprocess, pickle, hashlib, crypt, requests, tarfile, ssl, jinja2, torch
from cryptography.hazmat.primitives.asymmetric import rsa
def f(cmd, data, user):
    subprocess.call(
        cmd,
        shell=True,
    )
    subprocess.Popen("ls", shell=True)  # nosec
    subprocess.Popen(cmd, shell=True)  # nosec B607
    subprocess.Popen(cmd, shell=True)  # nosec: subprocess_popen_with_shell_equals_true
    subprocess.Popen(cmd, shell=True)  # nosec because reviewed
    subprocess.Popen(cmd, shell=True)  # noqa: S602
    subprocess.Popen(cmd, shell=True)  # noqa
    subprocess.Popen(cmd,  # nosec
        shell=True)
    os.system(cmd); os.system("ls")
    pickle.loads(data)
    hashlib.md5(data); crypt.crypt("x", crypt.METHOD_MD5)
    requests.get("http://x",
                 verify=False)
    tarfile.open("x").extractall()
    tarfile.open("x").extractall(members=safe(data))
    tarfile.open("x").extractall(members=[m])
    ssl.wrap_socket(sock, ssl_version=ssl.PROTOCOL_SSLv3)
    os.chmod("/x", 0o777); os.chmod("/x", 0o750)
    if host in ("0.0.0.0", "::"):
        pass
    jinja2.Environment(loader=x, autoescape=flag)
    rsa.generate_private_key(public_exponent=65537, key_size=512)
    torch.load(data)
"""
# (rule, line, severity, confidence, CWE) as bandit 1.9.4 reported them (B614 on torch.load aside)
BANDIT_SAW = [
    ("bandit:B602", 6, "high", "high", "CWE-78"),  # the line of `shell=`, as bandit reports it
    ("bandit:B602", 9, "high", "high", "CWE-78"),  # a nosec naming another check
    ("bandit:B602", 13, "high", "high", "CWE-78"),  # a bare noqa is about another rule
    ("bandit:B605", 16, "high", "high", "CWE-78"),
    ("bandit:B605", 16, "low", "high", "CWE-78"),  # a literal command
    ("bandit:B301", 17, "medium", "high", "CWE-502"),
    ("bandit:B324", 18, "high", "high", "CWE-327"),
    ("bandit:B324", 18, "medium", "high", "CWE-327"),  # crypt's method
    ("bandit:B501", 20, "high", "high", "CWE-295"),  # the line of `verify=`
    ("bandit:B113", 19, "low", "low", "CWE-400"),  # medium, one down for bandit's low confidence
    ("bandit:B202", 21, "high", "high", "CWE-22"),
    ("bandit:B202", 22, "low", "low", "CWE-22"),  # members from a call: a filter bandit cannot judge
    ("bandit:B202", 23, "medium", "medium", "CWE-22"),
    ("bandit:B502", 24, "high", "high", "CWE-327"),
    ("bandit:B103", 25, "high", "high", "CWE-732"),  # world-writable
    ("bandit:B103", 25, "medium", "high", "CWE-732"),
    ("bandit:B701", 28, "high", "medium", "CWE-94"),  # autoescape from a value
    ("bandit:B505", 29, "high", "high", "CWE-326"),  # below 1,024 bits
]


def added(path: str, text: str) -> ChangedFile:
    return ChangedFile(FileChange(path=path, old_path=path, status="added", collapsed=True), text)


def _found(text: str, path: str = "f.py") -> list[tuple[str, int, str, str, str | None]]:
    return sorted((i.rule, i.line, i.severity, i.confidence, i.cwe) for i in bandit_issues(added(path, text)))


def test_findings_keep_bandit_s_ids_lines_grading_and_suppressions() -> None:
    assert _found(GRADED) == sorted(BANDIT_SAW)


def test_a_finding_on_a_line_the_change_did_not_touch_is_not_kept() -> None:
    from tests.unit.reviewers.test_reviewer_analyzers import edited_file

    text = "import subprocess\nsubprocess.call(\n    cmd,\n    shell=True,\n)\nx = 1\n"
    assert [i.line for i in bandit_issues(edited_file("a.py", text, added={3}))] == [3]  # a line of the call
    assert bandit_issues(edited_file("a.py", text, added={6})) == []


SQL = "import sqlite3\n\n\ndef f(c, name):\n    return c.execute(f\"SELECT * FROM t WHERE n = '{name}'\")\n"
SHELL = "import subprocess\n\n\ndef g(p):\n    subprocess.run(f'gzip {p}', shell=True)\n"
CLEAN = "def h(x):\n    return x + 1\n"


def _no_single_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def single(text: str, path: str, flags: Any = None) -> str:
        raise AssertionError(f"{path} was run alone")

    monkeypatch.setattr(ruff, "_ruff_single", single)


def test_one_ruff_process_answers_a_whole_review(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [("a.py", SQL + "# batch\n"), ("b.py", SHELL + "# batch\n"), ("c.py", CLEAN + "# batch\n")]
    alone = {path: _found(text, path) for path, text in files}
    ruff._ruff_single.cache_clear()
    batches: list[int] = []
    real_batch = ruff._ruff_batch

    def counted_batch(keys: Any, flags: tuple[str, ...]) -> Any:
        batches.append(len(keys))
        return real_batch(keys, flags)

    monkeypatch.setattr(ruff, "_ruff_batch", counted_batch)
    bandit.prefetch([(path, text + "# again\n") for path, text in files])
    _no_single_run(monkeypatch)
    assert batches == [3]
    assert {path: _found(text + "# again\n", path) for path, text in files} == alone
    assert [rule for rule, *_ in alone["b.py"]] == ["bandit:B602"] and alone["a.py"] == []  # SQL text is ours


def test_an_unparsable_file_does_not_cost_the_others_their_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [("broken.py", "def broken(:\n"), ("b.py", SHELL + "# unparsable neighbour\n")]
    bandit.prefetch(files)
    _no_single_run(monkeypatch)
    assert bandit_issues(added(*files[0])) == []
    assert [i.rule for i in bandit_issues(added(*files[1]))] == ["bandit:B602"]


def test_a_prefetch_in_the_background_is_waited_for_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [("a.py", SQL + "# background\n"), ("b.py", SHELL + "# background\n")]
    release = threading.Event()
    real_batch = ruff._ruff_batch

    def slow_batch(keys: Any, flags: Any) -> Any:
        release.wait(10)
        return real_batch(keys, flags)

    monkeypatch.setattr(ruff, "_ruff_batch", slow_batch)
    bandit.prefetch(files, background=True)  # returns at once; the batch waits for `release`
    assert ruff._key(files[1][1], "b.py", BANDIT_RULES) not in ruff._prefetched
    _no_single_run(monkeypatch)
    threading.Timer(0.2, release.set).start()
    assert [i.rule for i in bandit_issues(added(*files[1]))] == ["bandit:B602"]
