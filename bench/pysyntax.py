"""What reading every Python version costs (`reviewers.analyzers.pysyntax.parse_python`), per file.

    python -m bench.pysyntax [--files 300]

A sample of real modules (the interpreter's own site-packages, 40 to 3,000 lines, a fixed seed), each
parsed three ways, wall time (the reader's work is in its child process, so CPU time of this one
would hide it):

- `ast.parse` of the file as it is: the running interpreter's cost, the baseline;
- `parse_python` of the same text: what a file 3.11 reads pays (the fast path);
- `parse_python` of the text with one PEP 701 line appended (`f"{d["k"]}"`), which 3.11 refuses:
  what a file in 3.12+ syntax pays (libcst in the child, the rewrite, 3.11's parse, the splice).
  Each such text is new to the reader, so nothing comes from its cache.

Printed, not appended to bench/RESULTS.md; the figures it gave are quoted in pysyntax's docstring.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import statistics
import sysconfig
import time
import warnings
from pathlib import Path

from reviewers.analyzers.pysyntax import parse_python

FILES = 300
MIN_LINES, MAX_LINES = 40, 3000
SEED = 21
NEWER_LINE = '\n_probe = f"{_d["k"]}"\n'  # valid from 3.12 on only


def sample(files: int) -> list[str]:
    root = Path(sysconfig.get_paths()["purelib"])
    paths = sorted(root.rglob("*.py"))
    random.Random(SEED).shuffle(paths)
    texts: list[str] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ast.parse(text)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        if MIN_LINES <= len(text.splitlines()) <= MAX_LINES:
            texts.append(text)
        if len(texts) >= files:
            break
    return texts


def timed(parse: object, text: str) -> float:
    start = time.perf_counter()
    parse(text)  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=FILES)
    files = parser.parse_args().files
    texts = sample(files)
    parse_python('x = f"{d["warm"]}"\n', "warm.py")  # start the reader's child once, outside the timings
    load_before = os.getloadavg()
    native, fast, newer, lines = [], [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, text in enumerate(texts):
            native.append(timed(ast.parse, text))
            fast.append(timed(lambda t: parse_python(t, "f.py"), text))
            newer.append(timed(lambda t: parse_python(t, "f.py"), text + NEWER_LINE + f"# {i}\n"))
            lines.append(len(text.splitlines()))
    load_after = os.getloadavg()
    ratios = [n / b for n, b in zip(newer, native, strict=True)]

    def row(name: str, values: list[float]) -> str:
        q = statistics.quantiles(values, n=10)
        return f"| {name} | {statistics.median(values):.1f} | {q[-1]:.1f} | {sum(values) / 1000:.1f} |"

    print(f"{len(texts)} files, median {statistics.median(lines):.0f} lines; load {load_before} -> {load_after}")
    print("| parse | median (ms) | p90 (ms) | total (s) |\n|---|---:|---:|---:|")
    print(row("ast.parse (3.11)", native))
    print(row("parse_python, 3.11 syntax", fast))
    print(row("parse_python, 3.12+ syntax", newer))
    p90 = statistics.quantiles(ratios, n=10)[-1]
    print(f"3.12+ file over ast.parse: median {statistics.median(ratios):.1f}x, p90 {p90:.1f}x")


if __name__ == "__main__":
    main()
