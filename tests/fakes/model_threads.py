"""torch threads for the tests that run the real base model.

A model test takes its share of the cores: all of them (at most two; about 1.5x faster than one)
when the suite runs one test at a time, the cores divided by the workers under pytest-xdist (one
each with `make test`'s two workers on two cores). On a machine other jobs share, threads contend
and run several times slower: set REVIEWLOOP_TEST_MODEL_THREADS=1 there.
"""

from __future__ import annotations

import os

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
MODEL_THREADS = int(
    os.environ.get("REVIEWLOOP_TEST_MODEL_THREADS") or max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
)
