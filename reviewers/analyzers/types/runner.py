"""The type checker's process: mypy over the base tree and the head tree, one after the other.

Run as a script (`python runner.py`, not as a module of the package, so it imports nothing of
reviewloop), with a JSON request on stdin:

    {"flags": [...], "seed": "/path/or/null", "base_only_for": ["call-arg", ...],
     "runs": [{"root": "/tmp/.../head", "files": ["pkg/m.py"]}, {"root": "/tmp/.../base", ...}]}

and answers one JSON line on stdout: for each run, mypy's exit status, its errors (mypy's own JSON
lines: file, line, column, code, message, severity) and the end of its error stream. The base
tree is read only when the head has an error of one of the codes `base_only_for` names: without
one there is nothing new to find.

Both trees go through one process: starting Python and importing mypy is paid once. What a cold
mypy spends is analysing the standard library's stubs (typeshed) before the first line of the
reviewed code, ~0.4 s of CPU; with a warm cache it is ~0.03 s (importing mypy's compiled modules
costs ~0.4 s more, once per process). The cache is a seed of the standard
library alone (`seed`), built once per mypy version and flags by analysing a file that imports the
modules projects use most, then copied into each run's own cache folder: a run writes the reviewed
modules into its copy, never into the seed, so nothing of one review's code stays on disk or reaches
another review, and concurrent reviews share no file they write.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any

# the standard library a project's modules import most (the seed's file imports each)
SEED_MODULES = (
    "abc argparse ast asyncio base64 binascii bisect calendar codecs collections collections.abc concurrent.futures "
    "configparser contextlib contextvars copy csv dataclasses datetime decimal difflib email email.message "
    "email.utils enum errno fnmatch functools getpass glob gzip hashlib heapq hmac html html.parser http "
    "http.client http.cookiejar http.cookies importlib importlib.metadata importlib.resources inspect io "
    "ipaddress itertools json locale logging logging.handlers math mimetypes numbers operator os os.path "
    "pathlib pickle pkgutil platform pprint queue random re secrets selectors shlex shutil signal socket "
    "sqlite3 ssl stat string struct subprocess sys tarfile tempfile textwrap threading time traceback types "
    "typing typing_extensions unittest unittest.mock urllib urllib.parse urllib.request uuid warnings weakref "
    "xml.etree.ElementTree zipfile zlib"
).split()


def _mypy(flags: list[str], cache: str, files: list[str]) -> tuple[int, list[dict[str, Any]], str]:
    from mypy import api

    stdout, stderr, status = api.run([*flags, "--cache-dir", cache, "--output", "json", *files])
    errors: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            errors.append(item)
    return status, errors, (stderr or "")[-2000:]


def _ensure_seed(seed: str, flags: list[str]) -> None:
    if os.path.isdir(seed):
        return
    parent = os.path.dirname(seed)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".seed-", dir=parent)
    try:
        source = os.path.join(work, "reviewloop_seed.py")
        with open(source, "w", encoding="utf-8") as out:
            out.write("".join(f"import {name}\n" for name in SEED_MODULES))
        cache = os.path.join(work, "cache")
        # from a folder of its own: a module in the working folder that shadows one of the standard
        # library's (a project's `types/`, `logging.py`) would be cached in its place, stale for every run
        here = os.getcwd()
        os.chdir(work)
        try:
            _mypy(flags, cache, [os.path.basename(source)])
        finally:
            os.chdir(here)
        try:
            os.rename(cache, seed)  # another review may have built it meanwhile: theirs is as good
        except OSError:
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    request = json.loads(sys.stdin.read())
    flags = list(request["flags"])
    seed = request.get("seed")
    if seed:
        try:
            _ensure_seed(seed, flags)
        except OSError:
            seed = None  # a read-only home: every run starts cold, nothing else changes
    answers: list[dict[str, Any]] = []
    wanted = set(request.get("base_only_for", []))
    for run in request["runs"]:
        if answers and wanted and not any(e.get("code") in wanted for e in answers[0]["errors"]):
            break  # the head has no error of a class reported: there is nothing to compare
        root = run["root"]
        cache = os.path.join(root, ".mypy-cache")
        if seed and os.path.isdir(seed):
            try:
                shutil.copytree(seed, cache)
            except OSError:
                shutil.rmtree(cache, ignore_errors=True)
        os.chdir(root)
        status, errors, stderr = _mypy(flags, cache, list(run["files"]))
        answers.append({"status": status, "errors": errors, "stderr": stderr})
    sys.stdout.write(json.dumps(answers) + "\n")


if __name__ == "__main__":
    main()
