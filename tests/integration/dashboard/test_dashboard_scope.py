"""The dashboard with a token scoped to projects (issue 11): its session lists, shows, charts and
votes on those projects' reviews only; another project's review or finding is "not found" and a
vote on it stores nothing. An admin token (from the environment) still sees every project."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest
from dashboard_harness import ENV_TOKEN, HTML, LiveServer, hidden_field, login, review_through_pipeline, rows

from api.auth import create_api_token

MINE, OTHER = "42", "555"  # reviews.project holds GitLab's numeric project id as text


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as session:
        yield session


def review_of(dsn: str, project: str, *, mr_iid: int, title: str) -> tuple[int, int]:
    """A review by the real pipeline, filed under `project`: (review id, its first finding's id)."""
    outcome = review_through_pipeline(dsn, title=title, mr_iid=mr_iid)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE reviews SET project = %s WHERE id = %s", (project, outcome.review_id))
    first = rows(dsn, "SELECT id FROM findings WHERE review_id = %s ORDER BY id LIMIT 1", outcome.review_id)
    return outcome.review_id, int(first[0]["id"])


def test_a_scoped_token_sees_and_votes_only_inside_its_projects(db_dsn: str, client: httpx.Client) -> None:
    mine, my_finding = review_of(db_dsn, MINE, mr_iid=4201, title="Orders lookup")
    other, other_finding = review_of(db_dsn, OTHER, mr_iid=5501, title="Billing lookup")
    with psycopg.connect(db_dsn) as conn:  # a vote on each, so the quality page has both to chart
        conn.execute(
            "INSERT INTO feedback (finding_id, user_key, source, value) VALUES (%s, 'x', 'api', 1), (%s, 'x', 'api', 1)",
            (my_finding, other_finding),
        )
    login(client, create_api_token(db_dsn, "team-42", projects=[MINE]))

    listing = client.get("/dashboard", headers=HTML)
    assert listing.status_code == 200
    assert "Orders lookup" in listing.text and "Billing lookup" not in listing.text
    quality = client.get("/dashboard/quality", headers=HTML).text
    assert f"{MINE} !4201" in quality and f"{OTHER} !5501" not in quality
    page = client.get(f"/dashboard/reviews/{mine}", headers=HTML)
    assert page.status_code == 200
    assert client.get(f"/dashboard/reviews/{other}", headers=HTML).status_code == 404

    csrf = hidden_field(page.text, "csrf")
    outside = client.post(f"/dashboard/findings/{other_finding}/vote", data={"value": "-1", "csrf": csrf}, headers=HTML)
    assert outside.status_code == 404
    assert rows(db_dsn, "SELECT * FROM feedback WHERE user_key LIKE 'token:%%'") == []
    inside = client.post(f"/dashboard/findings/{my_finding}/vote", data={"value": "-1", "csrf": csrf}, headers=HTML)
    assert inside.status_code == 303
    voted = rows(db_dsn, "SELECT finding_id, user_key FROM feedback WHERE user_key LIKE 'token:%%'")
    assert voted == [{"finding_id": my_finding, "user_key": "token:team-42"}]

    # a bearer header carries the same scope; the admin token from the environment sees both projects
    bearer = {"Authorization": f"Bearer {ENV_TOKEN}"}
    assert client.get(f"/dashboard/reviews/{other}", headers=bearer).status_code == 200
    everything = client.get("/dashboard", headers=bearer).text
    assert "Orders lookup" in everything and "Billing lookup" in everything
