"""The device the learning tests train and decode on: the CPU, unless `REVIEWLOOP_TEST_DEVICE` names
another (`cuda` on a lent GPU machine: `scripts/device_check.sh`). CI has no GPU, so CI runs them on
the CPU; the same tests on CUDA cover what only a GPU runs (bfloat16 weights, xgrammar's GPU mask)."""

from __future__ import annotations

import os
from typing import Literal, cast

TEST_DEVICE = cast(Literal["cpu", "cuda"], os.environ.get("REVIEWLOOP_TEST_DEVICE", "cpu"))
