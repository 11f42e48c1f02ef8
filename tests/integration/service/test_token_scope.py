"""API tokens scoped to projects (issue 11, "every API token can read every project's reviews"): a
token created with projects reads and votes on those projects' reviews only, through the running
service (real HTTP, real Postgres); outside its scope a review or finding reads as absent (404, not
403: ids are no oracle) and nothing is stored. Admin tokens (stored without projects, and every
token from REVIEWLOOP_API_TOKENS) still reach every project."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
import pytest
from service_harness import API_TOKEN, LiveServer, rows

from api.auth import create_api_token
from reviewers.kernel.errors import ConfigError

MINE, OTHER = "42", "555"  # reviews.project holds GitLab's numeric project id as text


def insert_review(dsn: str, project: str) -> tuple[int, int]:
    """A finished review of `project` with one finding: (review id, finding id)."""
    with psycopg.connect(dsn) as conn:
        review = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, head_sha, status, title)"
            " VALUES ('gitlab', %s, 7, %s, 'done', %s) RETURNING id",
            (project, uuid.uuid4().hex, f"Change in {project}"),
        ).fetchone()
        assert review is not None
        finding = conn.execute(
            "INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,"
            " reviewer, verdict, verdict_reason) VALUES (%s, %s, 'app.py', 2, 2, 'security', 'high', 'SQL injection',"
            " 'body', 'security', 'REAL', 'evidence') RETURNING id",
            (review[0], uuid.uuid4().hex),
        ).fetchone()
        assert finding is not None
    return int(review[0]), int(finding[0])


def api(service: LiveServer, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, f"{service.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30, **kwargs
    )


def listed_projects(service: LiveServer, token: str, query: str = "") -> list[str]:
    answer = api(service, "GET", f"/api/v1/reviews{query}", token)
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert page["total"] == len(page["items"])
    return sorted(item["project"] for item in page["items"])


def test_a_scoped_token_reads_only_its_projects_reviews(service: LiveServer, service_dsn: str) -> None:
    mine, _ = insert_review(service_dsn, MINE)
    other, _ = insert_review(service_dsn, OTHER)
    scoped = create_api_token(service_dsn, "team-42", projects=[MINE])
    admin = create_api_token(service_dsn, "ops")

    assert listed_projects(service, scoped) == [MINE]
    assert listed_projects(service, scoped, f"?project={OTHER}") == []  # the filter cannot widen the scope
    assert api(service, "GET", f"/api/v1/reviews/{mine}", scoped).json()["project"] == MINE
    outside = api(service, "GET", f"/api/v1/reviews/{other}", scoped)
    missing = api(service, "GET", "/api/v1/reviews/999999", scoped)
    # another project's review answers exactly as a review that does not exist
    assert outside.status_code == missing.status_code == 404
    assert outside.json()["error"].replace(str(other), "N") == missing.json()["error"].replace("999999", "N")

    # admin tokens, stored or from the environment, still read every project
    for token in (admin, API_TOKEN):
        assert listed_projects(service, token) == [MINE, OTHER]
        assert api(service, "GET", f"/api/v1/reviews/{other}", token).status_code == 200


def test_a_scoped_token_votes_only_on_its_projects_findings(service: LiveServer, service_dsn: str) -> None:
    _, mine = insert_review(service_dsn, MINE)
    _, other = insert_review(service_dsn, OTHER)
    scoped = create_api_token(service_dsn, "team-42", projects=[MINE, "7"])

    refused = api(service, "POST", f"/api/v1/findings/{other}/feedback", scoped, json={"value": -1})
    assert refused.status_code == 404, refused.text
    assert rows(service_dsn, "SELECT * FROM feedback") == []
    accepted = api(service, "POST", f"/api/v1/findings/{mine}/feedback", scoped, json={"value": -1})
    assert accepted.status_code == 200, accepted.text
    assert rows(service_dsn, "SELECT finding_id, user_key, value FROM feedback") == [(mine, "token:team-42", -1)]
    # the admin token from the environment still votes anywhere
    assert api(service, "POST", f"/api/v1/findings/{other}/feedback", API_TOKEN, json={"value": 1}).status_code == 200


def test_a_token_scope_is_numeric_gitlab_project_ids(service_dsn: str) -> None:
    for bad in ("team/service", "-1", "0", "4 2", "٤٢"):
        with pytest.raises(ConfigError, match="numeric GitLab project id"):
            create_api_token(service_dsn, f"bad-{uuid.uuid4().hex[:6]}", projects=[bad])
    assert rows(service_dsn, "SELECT * FROM api_tokens") == []
    create_api_token(service_dsn, "dup", projects=["042", "42"])
    assert rows(service_dsn, "SELECT projects FROM api_tokens WHERE name = 'dup'") == [(["42"],)]
