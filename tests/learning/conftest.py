"""Fixtures of the learning tests: a synthetic review history in a real Postgres, its datasets, and
a tiny model whose tokenizer was trained on text of the same kind (never on the test split)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from learning_store import SyntheticStore, insert_synthetic, synthetic_mrs
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agent.store.db import open_pool
from agent.store.migrate import upgrade
from agent.strategy import STRATEGY_SYSTEM_PROMPT

SYNTHETIC_MRS = 60  # ~45 posted reviews clear the SFT bar, ~30 DPO pairs; 20% of MRs held out by time


@pytest.fixture(scope="module")
def synthetic_store(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyntheticStore]:
    """A database with a synthetic review history, and the datasets built from it (once per module)."""
    from learning.datasets import build_datasets

    name = f"rl_learn_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(pg_admin_dsn)
    params["dbname"] = name
    dsn = make_conninfo(**params)
    upgrade(dsn)
    with open_pool(dsn, max_size=2) as pool:
        insert_synthetic(pool, synthetic_mrs(SYNTHETIC_MRS, seed=1), seed=1, start=datetime(2025, 1, 1, tzinfo=UTC))
    out = tmp_path_factory.mktemp("datasets")
    build_datasets(dsn, out)
    yield SyntheticStore(dsn=dsn, dataset_dir=out)
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-style model; its tokenizer learned from other synthetic MRs (seed 99)."""
    from learning.episodes import s1_for_snapshot
    from learning.tiny_model import build_tiny_model

    mrs = synthetic_mrs(40, seed=99)
    corpus = [STRATEGY_SYSTEM_PROMPT] + [s1_for_snapshot(m.snapshot) for m in mrs] + [m.good.to_json() for m in mrs]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, corpus=corpus, vocab_size=1024)
