"""torch threads for the tests that run the real base model.

The suite runs one test at a time, so a model test may use both cores of a two-core machine (about
1.5x faster than one); on a machine other jobs share, two threads contend and run several times
slower: set REVIEWLOOP_TEST_MODEL_THREADS=1 there.
"""

from __future__ import annotations

import os

MODEL_THREADS = int(os.environ.get("REVIEWLOOP_TEST_MODEL_THREADS") or min(2, os.cpu_count() or 1))
