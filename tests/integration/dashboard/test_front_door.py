"""The server's bare address leads a browser to the dashboard (the app over real HTTP)."""

from __future__ import annotations

import httpx
from dashboard_harness import LiveServer


def test_the_root_redirects_to_the_dashboard(live: LiveServer) -> None:
    browser = {"Accept": "text/html,application/xhtml+xml"}
    with httpx.Client(base_url=live.url, timeout=30, headers=browser) as client:
        answer = client.get("/", follow_redirects=False)
        assert answer.status_code == 307 and answer.headers["location"] == "/dashboard"
        landed = client.get("/", follow_redirects=True)
    # a browser without a session lands on the dashboard's login form, not on a JSON 404
    assert landed.status_code == 200 and landed.url.path == "/dashboard/login"
    assert "text/html" in landed.headers["content-type"]
