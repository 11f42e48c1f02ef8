"""The store's repository layer against a real Postgres: every function, and the pool riding out a
killed connection."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from agent.store import feedback, models, rejections, reviews
from agent.store.db import Database, Pool, connect_store, connection, describe_dsn, open_pool, resolve_dsn
from agent.strategy import RiskArea, Strategy
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Category, Finding, PlanItem
from reviewers.kernel.errors import InputError, StoreError

PROJECT = "group/app"


@pytest.fixture
def pool(db_dsn: str) -> Iterator[Pool]:
    p = open_pool(db_dsn, min_size=1, max_size=2)
    yield p
    p.close()


def make_finding(path: str, line: int, *, category: Category = "security", evidence: str = "") -> Finding:
    evidence = evidence or f"subprocess.run(cmd_{line}, shell=True)"
    return Finding(
        path=path,
        line=line,
        end_line=line,
        category=category,
        severity="high",
        title=f"problem at {path}:{line}",
        body="explained",
        evidence=evidence,
        fingerprint=make_fingerprint(path=path, category=category, rule="r", evidence=evidence),
        reviewer=category,
        rule="r",
    )


def gitlab_review(pool: Database, *, mr_iid: int = 1, head_sha: str = "h1", project: str = PROJECT) -> int:
    return reviews.create_review(
        pool, source="gitlab", project=project, mr_iid=mr_iid, head_sha=head_sha, title="Add login"
    )


# --- connections -----------------------------------------------------------------------------------


def test_open_pool_fails_with_one_retryable_error_that_hides_the_password() -> None:
    dsn = "postgresql://user:hunter2@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError) as info:
        open_pool(dsn, acquire_timeout_s=1.0)
    assert info.value.retryable
    assert "127.0.0.1:1/nowhere" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert describe_dsn(dsn) == "127.0.0.1:1/nowhere"


def test_resolve_dsn_uses_the_configured_url(tmp_path: Path) -> None:
    url = "postgresql://u@db.example:5433/rl"
    assert resolve_dsn(database_url=url, data_dir=tmp_path) == url
    assert not (tmp_path / "postgres").exists()  # no embedded server was started


def test_connect_store_migrates_an_empty_database(pg_admin_dsn: str, tmp_path: Path) -> None:
    name = f"rl_empty_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = make_conninfo(pg_admin_dsn, dbname=name)
        store = connect_store(database_url=dsn, data_dir=tmp_path, pool_size=2)
        try:
            with store.connection() as conn:
                versions = conn.execute("SELECT version FROM schema_migrations").fetchall()
            assert (1,) in versions
            assert reviews.list_reviews(store) == []
            assert store.conninfo == dsn
        finally:
            store.close()
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _backend_pid(pool: Pool) -> int:
    with pool.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def _terminate(admin_dsn: str, pid: int) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        assert row == (True,)


def test_pool_replaces_a_connection_the_server_killed(pg_admin_dsn: str, db_dsn: str) -> None:
    pool = open_pool(db_dsn, min_size=1, max_size=1)
    try:
        before = _backend_pid(pool)
        _terminate(pg_admin_dsn, before)
        # the pool's check finds the dead connection and hands out a fresh one: no error at all
        review_id = gitlab_review(pool)
        assert reviews.get_review(pool, review_id) is not None
        assert _backend_pid(pool) != before
    finally:
        pool.close()


def test_connection_killed_mid_transaction_is_a_retryable_store_error(pg_admin_dsn: str, pool: Pool) -> None:
    with pytest.raises(StoreError) as info:
        with connection(pool) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            _terminate(pg_admin_dsn, int(row[0]))
            conn.execute("SELECT 1")
    assert info.value.retryable
    # the next call gets a working connection
    assert reviews.get_review(pool, gitlab_review(pool)) is not None


def test_calls_on_a_caller_connection_share_its_transaction(pool: Pool) -> None:
    with pool.connection() as conn:
        review_id = gitlab_review(conn)
        assert reviews.get_review(conn, review_id) is not None
        conn.rollback()
    assert reviews.get_review(pool, review_id) is None


# --- reviews ---------------------------------------------------------------------------------------


def test_review_lifecycle(pool: Pool) -> None:
    review_id = reviews.create_review(
        pool,
        source="gitlab",
        project=PROJECT,
        mr_iid=7,
        title="Add login",
        base_sha="b",
        start_sha="s",
        head_sha="h2",
        previous_head_sha="h1",
        snapshot={"description": "adds a login form", "files": {"app.py": "x = 1\n"}},
    )
    assert reviews.create_review(pool, source="gitlab", project=PROJECT, mr_iid=7, head_sha="h2") == review_id
    shadow = reviews.create_review(
        pool, source="gitlab", project=PROJECT, mr_iid=7, head_sha="h2", is_shadow=True, parent_review_id=review_id
    )
    assert shadow != review_id

    reviews.mark_running(pool, review_id, trace_id="ab" * 16)
    strategy = Strategy(
        change_type="feature",
        risk_areas=[RiskArea(path="app.py", why="shell command")],
        plan=[PlanItem(reviewer="security", focus_paths=["app.py"], checks="injection")],
    )
    version = models.register_version(pool, name="strat-1", base_model="tiny")
    reviews.set_strategy(
        pool,
        review_id,
        strategy_json=strategy.to_json(),
        strategy_text=strategy.render(),
        strategy_source="model",
        model_version_id=version,
    )
    running = reviews.get_review(pool, review_id)
    assert running is not None
    assert running["status"] == "running" and running["started_at"] is not None
    assert running["trace_id"] == "ab" * 16
    assert Strategy.model_validate(running["strategy"]) == strategy
    assert running["strategy_source"] == "model" and running["model_version_id"] == version
    assert running["snapshot"] == {"description": "adds a login form", "files": {"app.py": "x = 1\n"}}

    reviews.mark_done(
        pool, review_id, stats={"findings": 2}, cost_tokens=1234, not_reviewed=[{"path": "big.bin", "reason": "binary"}]
    )
    done = reviews.get_review(pool, review_id)
    assert done is not None
    assert (done["status"], done["cost_tokens"], done["stats"]) == ("done", 1234, {"findings": 2})
    assert done["not_reviewed"] == [{"path": "big.bin", "reason": "binary"}]
    assert done["finished_at"] is not None and done["previous_head_sha"] == "h1"

    reviews.mark_failed(pool, shadow, "model server down " + "x" * 10_000)
    failed = reviews.get_review(pool, shadow)
    assert failed is not None and failed["status"] == "failed"
    assert failed["error"] is not None and len(failed["error"]) == reviews.MAX_ERROR_CHARS
    assert failed["parent_review_id"] == review_id and failed["is_shadow"]

    superseded = gitlab_review(pool, head_sha="h0")
    reviews.mark_superseded(pool, superseded)
    review = reviews.get_review(pool, superseded)
    assert review is not None and review["status"] == "superseded"


def test_updates_of_a_missing_review_or_bad_strategy_are_input_errors(pool: Pool) -> None:
    with pytest.raises(InputError, match="no review with id 999"):
        reviews.mark_running(pool, 999)
    with pytest.raises(InputError, match="not JSON"):
        reviews.set_strategy(pool, gitlab_review(pool), strategy_json="{nope", strategy_text="", strategy_source="rule")
    with pytest.raises(InputError):
        reviews.create_review(pool, source="local", parent_review_id=424242)
    assert reviews.get_review(pool, 999) is None


def test_save_findings_is_idempotent(pool: Pool) -> None:
    review_id = gitlab_review(pool)
    a, b, c = make_finding("app.py", 3), make_finding("app.py", 9), make_finding("db.py", 1)
    first = reviews.save_findings(pool, review_id, [(a, "REAL", "evidence found"), (b, "FALSE_POSITIVE", "test")])
    again = reviews.save_findings(
        pool,
        review_id,
        [(a, "REAL", "evidence found"), (b, "FALSE_POSITIVE", "test"), (c, "NEEDS_HUMAN_REVIEW", "low rate")],
    )
    assert set(first) == {a.fingerprint, b.fingerprint}
    assert {k: again[k] for k in first} == first
    assert set(again) == {a.fingerprint, b.fingerprint, c.fingerprint}
    # a duplicate within one call is one finding
    dup = reviews.save_findings(pool, review_id, [(c, "REAL", "x"), (c, "REAL", "y")])
    assert dup == {c.fingerprint: again[c.fingerprint]}
    detail = reviews.get_review(pool, review_id)
    assert detail is not None
    assert [f["fingerprint"] for f in detail["findings"]] == [a.fingerprint, b.fingerprint, c.fingerprint]
    assert detail["findings"][2]["verdict"] == "NEEDS_HUMAN_REVIEW"  # the first write stands
    assert reviews.save_findings(pool, review_id, []) == {}


def test_save_findings_refuses_a_finding_without_fingerprint(pool: Pool) -> None:
    bad = make_finding("app.py", 1).model_copy(update={"fingerprint": ""})
    with pytest.raises(InputError, match="no fingerprint"):
        reviews.save_findings(pool, gitlab_review(pool), [(bad, "REAL", "r")])


def test_posted_threads_and_thread_state(pool: Pool) -> None:
    review_id = gitlab_review(pool, mr_iid=5)
    a, b, c = make_finding("app.py", 3), make_finding("app.py", 9), make_finding("db.py", 1)
    ids = reviews.save_findings(pool, review_id, [(a, "REAL", "r"), (b, "REAL", "r"), (c, "REAL", "r")])
    reviews.record_posted(pool, ids[a.fingerprint], discussion_id="d-a", note_id=101, position_fallback=False)
    reviews.record_posted(pool, ids[b.fingerprint], discussion_id="d-b", note_id=102, position_fallback=True)
    # c is not posted; a shadow review's and another MR's findings never count
    shadow = reviews.create_review(
        pool, source="gitlab", project=PROJECT, mr_iid=5, head_sha="h1", is_shadow=True, parent_review_id=review_id
    )
    d = make_finding("shadow.py", 1)
    sid = reviews.save_findings(pool, shadow, [(d, "REAL", "r")])
    reviews.record_posted(pool, sid[d.fingerprint], discussion_id="d-s", note_id=103, position_fallback=False)

    posted = reviews.posted_fingerprints(pool, project=PROJECT, mr_iid=5)
    assert posted == {
        a.fingerprint: reviews.PostedThread("d-a", 101, "app.py", 3),
        b.fingerprint: reviews.PostedThread("d-b", 102, "app.py", 9),
    }
    reviews.set_thread_state(pool, ids[a.fingerprint], "resolved")
    assert set(reviews.posted_fingerprints(pool, project=PROJECT, mr_iid=5)) == {b.fingerprint}
    assert reviews.posted_fingerprints(pool, project=PROJECT, mr_iid=6) == {}
    detail = reviews.get_review(pool, review_id)
    assert detail is not None
    posted_b = next(f for f in detail["findings"] if f["fingerprint"] == b.fingerprint)
    assert posted_b["position_fallback"] and posted_b["posted_at"] is not None
    with pytest.raises(InputError):
        reviews.record_posted(pool, 999_999, discussion_id="x", note_id=None, position_fallback=False)
    with pytest.raises(InputError):
        reviews.set_thread_state(pool, 999_999, "outdated")


def test_summary_note_and_last_reviewed_head(pool: Pool) -> None:
    assert reviews.last_reviewed_head(pool, project=PROJECT, mr_iid=3) is None
    first = gitlab_review(pool, mr_iid=3, head_sha="aaa")
    reviews.mark_done(pool, first, stats={}, cost_tokens=0)
    second = gitlab_review(pool, mr_iid=3, head_sha="bbb")
    reviews.mark_done(pool, second, stats={}, cost_tokens=0)
    gitlab_review(pool, mr_iid=3, head_sha="ccc")  # still pending: not reviewed yet
    assert reviews.last_reviewed_head(pool, project=PROJECT, mr_iid=3) == "bbb"
    assert reviews.last_reviewed_head(pool, project="other/app", mr_iid=3) is None

    assert reviews.last_summary_note_id(pool, project=PROJECT, mr_iid=3) is None
    reviews.record_summary_note(pool, first, note_id=555)
    assert reviews.last_summary_note_id(pool, project=PROJECT, mr_iid=3) == 555


def test_list_reviews_pages_newest_first_with_counts(pool: Pool) -> None:
    ids = [gitlab_review(pool, mr_iid=i, head_sha=f"h{i}") for i in range(1, 4)]
    other = gitlab_review(pool, mr_iid=1, head_sha="x", project="other/app")
    reviews.save_findings(
        pool, ids[0], [(make_finding("a.py", 1), "REAL", "r"), (make_finding("a.py", 2), "FALSE_POSITIVE", "r")]
    )
    listed = reviews.list_reviews(pool)
    assert [r["id"] for r in listed] == [other, *reversed(ids)]
    page = reviews.list_reviews(pool, limit=2, offset=1, project=PROJECT)
    assert [r["id"] for r in page] == [ids[1], ids[0]]
    assert (page[1]["finding_count"], page[1]["real_count"]) == (2, 1)
    assert "snapshot" not in page[0]
    with pytest.raises(InputError):
        reviews.list_reviews(pool, limit=0)


def test_rejected_fingerprints_and_acceptance_rates(pool: Pool) -> None:
    review_id = gitlab_review(pool)
    accepted = make_finding("a.py", 1)
    rejected = make_finding("a.py", 2)
    tied = make_finding("b.py", 1, category="code_quality")
    unvoted = make_finding("b.py", 2, category="code_quality")
    ids = reviews.save_findings(pool, review_id, [(f, "REAL", "r") for f in (accepted, rejected, tied, unvoted)])
    feedback.record_vote(pool, ids[accepted.fingerprint], user_key="gitlab:1", source="emoji", value=1)
    feedback.record_vote(pool, ids[accepted.fingerprint], user_key="gitlab:2", source="emoji", value=1)
    feedback.record_vote(pool, ids[rejected.fingerprint], user_key="gitlab:1", source="emoji", value=-1)
    feedback.record_vote(pool, ids[tied.fingerprint], user_key="gitlab:1", source="emoji", value=1)
    feedback.record_vote(pool, ids[tied.fingerprint], user_key="gitlab:2", source="api", value=-1)
    # the same rejected fingerprint in another project is that project's business
    elsewhere = gitlab_review(pool, project="other/app")
    other_ids = reviews.save_findings(pool, elsewhere, [(accepted, "REAL", "r")])
    feedback.record_vote(pool, other_ids[accepted.fingerprint], user_key="gitlab:3", source="emoji", value=-1)

    assert rejections.rejected_fingerprints(pool, project=PROJECT) == {rejected.fingerprint: 1}
    assert rejections.rejected_fingerprints(pool, project="other/app") == {accepted.fingerprint: 1}
    assert rejections.standings(pool, project=PROJECT) == {("security", "security"): (1, 1, 1)}
    assert rejections.standings(pool) == {("security", "security"): (1, 2, 2)}

    detail = reviews.get_review(pool, review_id)
    assert detail is not None
    scores = {f["fingerprint"]: (f["score"], len(f["feedback"])) for f in detail["findings"]}
    assert scores == {
        accepted.fingerprint: (2, 2),
        rejected.fingerprint: (-1, 1),
        tied.fingerprint: (0, 2),
        unvoted.fingerprint: (0, 0),
    }


# --- feedback --------------------------------------------------------------------------------------


def test_the_latest_vote_of_a_user_wins(pool: Pool) -> None:
    review_id = gitlab_review(pool)
    finding = make_finding("a.py", 1)
    finding_id = reviews.save_findings(pool, review_id, [(finding, "REAL", "r")])[finding.fingerprint]
    reviews.record_posted(pool, finding_id, discussion_id="disc-1", note_id=77, position_fallback=False)

    first = feedback.record_vote(pool, finding_id, user_key="gitlab:1", source="emoji", value=1)
    second = feedback.record_vote(
        pool, finding_id, user_key="gitlab:1", source="reply", value=-1, comment="not a problem here"
    )
    assert first == second
    feedback.record_vote(pool, finding_id, user_key="gitlab:2", source="dashboard", value=1)
    votes = feedback.feedback_for_finding(pool, finding_id)
    assert [(v["user_key"], v["source"], v["value"], v["comment"]) for v in votes] == [
        ("gitlab:1", "reply", -1, "not a problem here"),
        ("gitlab:2", "dashboard", 1, None),
    ]
    assert votes[0]["updated_at"] > votes[0]["created_at"]
    feedback.record_vote(pool, finding_id, user_key="gitlab:2", source="emoji", value=0)  # withdrawn
    assert rejections.rejected_fingerprints(pool, project=PROJECT) == {finding.fingerprint: 1}

    assert feedback.finding_by_note_id(pool, 77) == finding_id
    assert feedback.finding_by_discussion_id(pool, "disc-1") == finding_id
    assert feedback.finding_by_note_id(pool, 78) is None
    assert feedback.finding_by_discussion_id(pool, "nope") is None


def test_bad_votes_are_input_errors(pool: Pool) -> None:
    with pytest.raises(InputError, match="no finding with id 424242"):
        feedback.record_vote(pool, 424242, user_key="gitlab:1", source="emoji", value=1)
    review_id = gitlab_review(pool)
    finding = make_finding("a.py", 1)
    finding_id = reviews.save_findings(pool, review_id, [(finding, "REAL", "r")])[finding.fingerprint]
    with pytest.raises(InputError, match="-1, 0 or 1"):
        feedback.record_vote(pool, finding_id, user_key="gitlab:1", source="emoji", value=2)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unknown feedback source"):
        feedback.record_vote(pool, finding_id, user_key="gitlab:1", source="slack", value=1)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="user key"):
        feedback.record_vote(pool, finding_id, user_key="", source="emoji", value=1)


# --- model versions and training runs --------------------------------------------------------------


def test_promote_and_rollback(pool: Pool) -> None:
    v1 = models.register_version(pool, name="v1", base_model="tiny", metrics={"reward": 0.1})
    v2 = models.register_version(
        pool, name="v2", base_model="tiny", adapter_path="/m/v2", serving_name="strat-v2", parent_id=v1
    )
    v3 = models.register_version(
        pool, name="v3", base_model="tiny", parent_id=v2, dataset_snapshot="ds@3", executor="model-driven"
    )
    executors = {v["name"]: v["executor"] for v in models.list_versions(pool)}
    assert executors == {"v1": None, "v2": None, "v3": "model-driven"}
    with pytest.raises(InputError, match="model_versions_executor_check"):
        models.register_version(pool, name="v4", base_model="tiny", executor="human")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="already exists"):
        models.register_version(pool, name="v1", base_model="tiny")
    with pytest.raises(InputError, match="no parent"):
        models.register_version(pool, name="v9", base_model="tiny", parent_id=999)
    assert models.production_version(pool) is None
    with pytest.raises(InputError, match="no earlier"):
        models.rollback(pool)

    models.promote(pool, v1)
    models.promote(pool, v2)
    models.promote(pool, v3)
    stages = {v["name"]: v["stage"] for v in models.list_versions(pool)}
    assert stages == {"v1": "archived", "v2": "archived", "v3": "production"}

    back = models.rollback(pool)
    assert (back["id"], back["stage"]) == (v2, "production")
    assert back["serving_name"] == "strat-v2" and back["parent_id"] == v1
    back = models.rollback(pool)  # v2 is rejected now; one further back
    assert back["id"] == v1
    stages = {v["name"]: v["stage"] for v in models.list_versions(pool)}
    assert stages == {"v1": "production", "v2": "rejected", "v3": "rejected"}
    with pytest.raises(InputError, match="no earlier"):
        models.rollback(pool)
    production = models.production_version(pool)
    assert production is not None and production["id"] == v1 and production["metrics"] == {"reward": 0.1}
    assert [v["id"] for v in models.list_versions(pool)] == [v3, v2, v1]
    with pytest.raises(InputError):
        models.promote(pool, 999)


def test_reject_candidate(pool: Pool) -> None:
    v1 = models.register_version(pool, name="cand", base_model="tiny")
    models.reject_version(pool, v1)
    version = models.get_version(pool, v1)
    assert version is not None and version["stage"] == "rejected"
    with pytest.raises(InputError):
        models.reject_version(pool, v1)  # only a candidate can be rejected
    assert models.get_version(pool, 999) is None


def test_training_runs(pool: Pool) -> None:
    sft = models.start_run(pool, "sft", {"lr": 1e-4, "steps": 2})
    rl = models.start_run(pool, "rl", {"sigma": 8}, parent_run_id=sft)
    models.log_step(pool, sft, {"step": 1, "loss": 2.5})
    models.log_step(pool, sft, {"step": 2, "loss": math.nan, "grad_norm": math.inf})
    version = models.register_version(pool, name="from-sft", base_model="tiny")
    models.finish_run(pool, sft, status="succeeded", metrics={"loss": 1.25}, model_version_id=version)
    models.finish_run(pool, rl, status="skipped", reason="too few reviews with feedback")

    run = models.get_run(pool, sft)
    assert run is not None
    assert run["step_metrics"] == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": None, "grad_norm": None}]
    assert (run["status"], run["metrics"], run["model_version_id"]) == ("succeeded", {"loss": 1.25}, version)
    assert run["config"] == {"lr": 1e-4, "steps": 2} and run["finished_at"] is not None
    assert [r["id"] for r in models.list_runs(pool)] == [rl, sft]
    skipped = models.list_runs(pool, kind="rl")
    assert [(r["id"], r["status"], r["reason"], r["parent_run_id"]) for r in skipped] == [
        (rl, "skipped", "too few reviews with feedback", sft)
    ]
    assert models.list_runs(pool, limit=1)[0]["id"] == rl
    with pytest.raises(InputError):
        models.log_step(pool, 999, {"step": 1})
    with pytest.raises(InputError):
        models.finish_run(pool, 999, status="failed")
    assert models.get_run(pool, 999) is None
