"""The dashboard names merge requests as people do (issue 42): a GitLab review, run over real HTTP
against the GitLab-compatible loopback server and stored in real Postgres, shows its merge request's
title, its project's path (not GitLab's numeric id) and a link to the merge request's page."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from dashboard_harness import ENV_TOKEN, HTML, LiveServer, login, rows
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.gitlab.client import GitLabPlatform
from agent.gitlab.review import ReviewDeps, review_gitlab_merge_request
from agent.session import prepare_database
from agent.store.db import open_pool
from api.dashboard.pages import merge_request_url, project_label

PID, IID = 31, 4
HEAD = {"svc/__init__.py": "", "svc/q.py": "import os\n\n\ndef run(cmd):\n    return os.system(cmd)\n"}


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=10) as c:
        yield c


def test_a_gitlab_review_is_listed_by_title_project_path_and_link(db_dsn: str, client: httpx.Client) -> None:
    prepare_database(db_dsn)  # the review's checkpointer tables, as the worker's start creates them
    with FakeGitLab() as fake:
        fake.add_project(PID, "payments/ledger")
        fake.add_merge_request(PID, IID, files_base={"svc/__init__.py": ""}, files_head=HEAD, title="Run ledger jobs")
        with open_pool(db_dsn) as pool:
            platform = GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=1)
            review_id = review_gitlab_merge_request(
                ReviewDeps(pool=pool, dsn=db_dsn, platform=platform), project=str(PID), mr_iid=IID, head_sha=None
            )
        mr_page = f"{fake.url}/payments/ledger/-/merge_requests/{IID}"
    [stored] = rows(db_dsn, "SELECT project, title, web_url FROM reviews WHERE id = %s", review_id)
    assert stored == {"project": str(PID), "title": "Run ledger jobs", "web_url": mr_page}

    login(client, ENV_TOKEN)
    listing = client.get("/dashboard", headers=HTML).text
    assert f'<a href="{mr_page}" rel="noopener noreferrer">payments/ledger !{IID}</a>' in listing
    assert re.search(rf'<a href="/dashboard/reviews/{review_id}">Run ledger jobs</a>', listing)
    assert "(untitled)" not in listing and f">{PID} !{IID}<" not in listing
    detail = client.get(f"/dashboard/reviews/{review_id}", headers=HTML).text
    assert "<h1>Run ledger jobs</h1>" in detail and f'href="{mr_page}"' in detail


def test_only_a_merge_request_address_becomes_a_link() -> None:
    assert merge_request_url("https://gitlab.example.com/a/b/-/merge_requests/3") is not None
    for bad in ("javascript:alert(1)//-/merge_requests/3", "https://gitlab.example.com/a/b", "", None):
        assert merge_request_url(bad) is None
    assert project_label(project="31", web_url="https://gitlab.example.com/grp/sub/app/-/merge_requests/3") == (
        "grp/sub/app"
    )
    assert project_label(project="31", web_url="") == "31"
