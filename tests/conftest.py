"""Shared fixtures. Postgres is real: the server `REVIEWLOOP_TEST_DATABASE_URL` names, or else an
embedded one started for the session. Each test that asks for `db_dsn` gets a fresh database with
the schema applied, dropped afterwards."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agent.store.migrate import upgrade

# Under pytest-xdist each worker gets its share of the cores for torch (read when torch first loads).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
DEVSET = SHARED / "devset" / "cases.jsonl"


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """A DSN for a maintenance database on a real Postgres server."""
    url = os.environ.get("REVIEWLOOP_TEST_DATABASE_URL")
    if url:
        yield url
        return
    from agent.store.embedded import start_embedded, stop_embedded

    # Not under pytest's basetemp: pytest deletes all but the newest three basetemps when a run
    # starts, so a second `make test` beside this one deleted the data directory of our running
    # server mid-run. The server is stopped at the end (the product's default keeps it running).
    data_dir = Path(tempfile.mkdtemp(prefix="reviewloop-test-pg-"))
    try:
        yield start_embedded(data_dir, database="postgres")
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _dsn_for(admin_dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture
def db_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"rl_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = _dsn_for(pg_admin_dsn, name)
    upgrade(dsn)
    yield dsn
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def devset_path() -> Path:
    if not DEVSET.exists():
        pytest.fail(f"the development set is missing at {DEVSET}; clone with ../shared beside the repo")
    return DEVSET


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """SmolLM2-135M-Instruct as a model directory, built once per run by `reviewloop dev base-model`
    (through the CLI, into a data directory of the run's own). Converting the GGUF takes ~20 s of
    CPU; tests that use it belong under `@pytest.mark.slow`. Under pytest-xdist the workers share one
    directory: the first builds it under a file lock, the others wait and reuse it."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the run's temp root, shared by every worker
    data_dir = root / "base-model-data"
    done = root / "base-model-path"
    with FileLock(str(root / "base-model.lock")):
        if done.is_file():
            return Path(done.read_text(encoding="utf-8"))
        path = _build_base_model(data_dir)
        done.write_text(str(path), encoding="utf-8")
        return path


def _build_base_model(data_dir: Path) -> Path:
    from typer.testing import CliRunner

    from api.cli import app

    data_dir.mkdir(parents=True, exist_ok=True)
    result = CliRunner().invoke(app, ["dev", "base-model"], env={"REVIEWLOOP_DATA_DIR": str(data_dir)})
    if result.exit_code != 0:
        pytest.fail(f"reviewloop dev base-model failed ({result.exit_code}): {result.output[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])
