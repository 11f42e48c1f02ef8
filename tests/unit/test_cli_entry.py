"""Every way of starting the command line works: the installed script's module (`python -m api.cli`)
and the package (`python -m api`). Running `api.cli` as `__main__` once imported it a second time
under its own name, and the command modules that registered on it met a half-built module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["api.cli", "api"])
def test_cli_starts_as_a_module(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "dev", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "make-env" in done.stdout  # registered by api.commands.envgen on the `dev` group
    assert "tiny-model" in done.stdout
