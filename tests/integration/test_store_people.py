"""People, not votes, in the store (issue 21): what `agent.store.rejections` counts on a real Postgres,
and migration 0006 folding earlier token votes into one voter per token."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agent.store import feedback, rejections, reviews, snapshots
from agent.store.db import Pool, open_pool
from agent.store.migrate import migration_files, upgrade
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Finding

PROJECT = "42"
AUTHOR = 31


@pytest.fixture
def pool(db_dsn: str) -> Iterator[Pool]:
    p = open_pool(db_dsn, min_size=1, max_size=2)
    yield p
    p.close()


def quiet(path: str, line: int) -> Finding:
    evidence = f"except OSError:  # {line}"
    return Finding(
        path=path,
        line=line,
        end_line=line,
        category="code_quality",
        severity="medium",
        title="silenced error",
        body="an error passes in silence",
        evidence=evidence,
        fingerprint=make_fingerprint(path=path, category="code_quality", rule="ruff:S110", evidence=evidence),
        reviewer="code_quality",
        rule="ruff:S110",
    )


def reviewed(pool: Pool, *, mr_iid: int, findings: list[Finding]) -> list[int]:
    review_id = reviews.create_review(pool, source="gitlab", project=PROJECT, mr_iid=mr_iid, head_sha=f"h{mr_iid}")
    reviews.record_mr_author(pool, review_id, author_id=AUTHOR)
    ids = reviews.save_findings(pool, review_id, [(f, "REAL", "r") for f in findings])
    return [ids[f.fingerprint] for f in findings]


def test_rules_paths_fingerprints_and_standing_count_people(pool: Pool) -> None:
    found = [quiet("a.py", n) for n in (1, 2, 3, 4, 5, 6)]
    ids = reviewed(pool, mr_iid=1, findings=found)
    for finding_id in ids:  # the author, on their own merge request
        feedback.record_vote(
            pool, finding_id, user_key=f"gitlab:{AUTHOR}", source="emoji", value=-1, voter_is_author=True
        )
    assert rejections.people_by_rule_and_path(pool, project=PROJECT) == ({}, {})
    assert rejections.standings(pool, project=PROJECT) == {}
    assert snapshots.path_acceptance(pool, project=PROJECT, paths=["a.py"]) == {}  # the strategy's path history
    # the author's 👎 holds on their own merge request, nowhere else
    assert rejections.rejected_fingerprints(pool, project=PROJECT, mr_iid=1) == {f.fingerprint: 1 for f in found}
    assert rejections.rejected_fingerprints(pool, project=PROJECT, mr_iid=2) == {}

    for finding_id in ids:  # one other person, six votes
        feedback.record_vote(pool, finding_id, user_key="gitlab:1", source="emoji", value=-1)
    by_rule, by_path = rejections.people_by_rule_and_path(pool, project=PROJECT)
    assert (by_rule, by_path) == ({"ruff:S110": (1, 0)}, {"a.py": (1, 0)})
    assert rejections.standings(pool, project=PROJECT) == {("code_quality", "code_quality"): (0, 6, 1)}
    assert snapshots.path_acceptance(pool, project=PROJECT, paths=["a.py"]) == {"a.py": 0.0}
    assert rejections.rejected_fingerprints(pool, project=PROJECT, mr_iid=2) == {f.fingerprint: 1 for f in found}

    feedback.record_vote(pool, ids[0], user_key="token:ci", source="api", value=-1)
    feedback.record_vote(pool, ids[1], user_key="gitlab:2", source="emoji", value=-1)
    feedback.record_vote(pool, ids[1], user_key="gitlab:3", source="emoji", value=1)
    by_rule, _ = rejections.people_by_rule_and_path(pool, project=PROJECT)
    assert by_rule == {"ruff:S110": (3, 1)}
    standing = rejections.standings(pool, project=PROJECT)[("code_quality", "code_quality")]
    assert standing == (0, 6, 3)  # finding 2 stays rejected (two people against one)
    # the latest vote of each person wins: gitlab:1 changes its mind on finding 1
    feedback.record_vote(pool, ids[0], user_key="gitlab:1", source="emoji", value=1)
    assert rejections.rejected_fingerprints(pool, project=PROJECT, mr_iid=2)[found[1].fingerprint] == 2
    assert found[0].fingerprint not in rejections.rejected_fingerprints(pool, project=PROJECT, mr_iid=2)


def flagged(path: str, line: int, *, rule: str, title: str) -> Finding:
    evidence = f"run({line})"
    return Finding(
        path=path, line=line, end_line=line, category="security", severity="high", title=title, body="b",
        evidence=evidence, reviewer="security", rule=rule,
        fingerprint=make_fingerprint(path=path, category="security", rule=rule, evidence=evidence),
    )  # fmt: skip


def test_votes_by_kind_count_each_person_once_per_kind_and_side(pool: Pool) -> None:
    """The strategy prompt's team votes (issue 41): two rules that report one kind of defect count
    together, a person once however many of its findings they voted on; a rule of no known kind keeps
    its id; an author's 👎 on their own merge request counts nowhere."""
    sql_a, sql_b, bare, untested = reviewed(
        pool,
        mr_iid=3,
        findings=[
            flagged("a.py", 1, rule="python:sql-interpolation", title="SQL statement built from request data"),
            flagged("b.py", 2, rule="bandit:B608", title="Possible SQL injection vector"),
            flagged("a.py", 3, rule="ruff:E722", title="Do not use bare `except`"),
            flagged("c.py", 4, rule="tests:untested-new", title="New code without tests: run"),
        ],
    )
    assert rejections.people_by_kind(pool, project=PROJECT) == {}
    for finding_id in (sql_a, sql_b):
        feedback.record_vote(pool, finding_id, user_key="gitlab:1", source="emoji", value=1)
    feedback.record_vote(pool, sql_b, user_key="gitlab:2", source="emoji", value=-1)
    feedback.record_vote(pool, bare, user_key="gitlab:1", source="emoji", value=-1)
    feedback.record_vote(pool, bare, user_key="gitlab:3", source="emoji", value=-1)
    feedback.record_vote(pool, untested, user_key="gitlab:2", source="emoji", value=1)
    feedback.record_vote(pool, untested, user_key=f"gitlab:{AUTHOR}", source="emoji", value=-1, voter_is_author=True)
    assert rejections.people_by_kind(pool, project=PROJECT) == {
        "sql-injection": (1, 1),  # (people 👎, people 👍)
        "bare-except": (2, 0),
        "tests:untested-new": (0, 1),
    }


def _database(admin_dsn: str, name: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = name
    return make_conninfo(**params)


def test_migration_0006_folds_each_tokens_votes_into_one_voter(pg_admin_dsn: str) -> None:
    name = f"rl_test_{uuid.uuid4().hex[:12]}"  # unique: another test run may share the server
    dsn = _database(pg_admin_dsn, name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:  # the schema as it was before 0006
            conn.execute(
                "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version, name, sql in migration_files():
                if version < 6:
                    conn.execute(sql.encode())
                    conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
            conn.execute("INSERT INTO api_tokens (name, token_hash) VALUES ('team:42', 'h1')")
            review = conn.execute("INSERT INTO reviews (source, project) VALUES ('gitlab', '42') RETURNING id")
            (review_id,) = review.fetchone() or (0,)
            finding = conn.execute(
                "INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,"
                " reviewer, verdict, verdict_reason) VALUES (%s, 'fp', 'a.py', 1, 1, 'security', 'high', 't', 'b',"
                " 'security', 'REAL', 'r') RETURNING id",
                (review_id,),
            )
            (finding_id,) = finding.fetchone() or (0,)
            legacy = [
                ("api:ci", -1, "1 hour"),
                ("api:ci:carol", 1, "3 minutes"),
                ("api:ci:dave", -1, "2 minutes"),  # the ci token's latest vote
                ("dashboard:ci", 1, "1 day"),
                ("api:team:42:ana", -1, "5 minutes"),  # a stored token whose name holds ':'
                ("gitlab:7", -1, "1 minute"),
            ]
            for user_key, value, ago in legacy:
                conn.execute(
                    "INSERT INTO feedback (finding_id, user_key, source, value, updated_at)"
                    " VALUES (%s, %s, 'api', %s, now() - %s::interval)",
                    (finding_id, user_key, value, ago),
                )
        assert upgrade(dsn)[:1] == ["0006_one_person_one_voice.sql"]  # and any later migration
        with psycopg.connect(dsn) as conn:
            kept = conn.execute(
                "SELECT user_key, claimed_user, value, voter_is_author FROM feedback ORDER BY user_key"
            ).fetchall()
        assert kept == [
            ("gitlab:7", None, -1, False),
            ("token:ci", "dave", -1, False),
            ("token:team:42", "ana", -1, False),
        ]
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
