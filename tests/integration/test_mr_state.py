"""The merge request's review state across pushes (issue 40, H1–H3), through the whole review on real
Postgres and python-gitlab against the GitLab fake over HTTP: threads follow the code, not the push;
the summary describes the merge request as it stands; the configuration comes from the target branch."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from psycopg.rows import dict_row

from agent.gitlab.client import GitLabPlatform
from agent.gitlab.review import ReviewDeps, review_gitlab_merge_request
from agent.sanitize import SUMMARY_MARKER
from agent.session import prepare_database
from agent.store.db import open_pool

PID, IID = 21, 4
# A vendor-prefixed live key (critical) and request data spliced into SQL (high): both post as threads.
TOKEN_LINE = 'STRIPE_KEY = "sk_live_' + "4eC39HqLyjWDarjtT1zdp7dc" + '"'
SQL_LINE = "    cur.execute(f\"SELECT * FROM users WHERE name = '{name}'\")"
API = (
    "from flask import request\n\n"
    f"{TOKEN_LINE}\n\n\n"
    "def lookup(cur):\n"
    "    name = request.args['name']\n"
    f"{SQL_LINE}\n"
    "    return cur.fetchall()\n"
)
BASE = {"svc/__init__.py": "", "README.md": "# Service\n"}
HEAD = {**BASE, "svc/api.py": API}


@pytest.fixture
def fake(db_dsn: str) -> Iterator[FakeGitLab]:
    prepare_database(db_dsn)
    with FakeGitLab() as server:
        server.add_project(PID, "team/state")
        yield server


def review(fake: FakeGitLab, dsn: str) -> int:
    with open_pool(dsn) as pool:
        platform = GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=1)
        return review_gitlab_merge_request(
            ReviewDeps(pool=pool, dsn=dsn, platform=platform), project=str(PID), mr_iid=IID, head_sha=None
        )


def our_threads(fake: FakeGitLab) -> dict[str, bool]:
    """The first line of each of our finding threads → whether it is resolved."""
    return {
        d.notes[0].body.split("\n", 1)[0]: d.notes[0].resolved
        for d in fake.discussions(PID, IID)
        if d.notes[0].resolvable and SUMMARY_MARKER not in d.notes[0].body
    }


def summary(fake: FakeGitLab) -> str:
    [note] = [n.body for n in fake.notes(PID, IID) if SUMMARY_MARKER in n.body]
    return note


def test_an_unrelated_push_leaves_the_threads_open_and_a_fix_resolves_only_its_own(
    fake: FakeGitLab, db_dsn: str
) -> None:
    fake.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Lookup by name")
    review(fake, db_dsn)
    first = our_threads(fake)
    assert any(h.startswith("**CRITICAL**") for h in first), first
    assert any(h.startswith("**HIGH**") and "SQL" in h for h in first), first
    assert not any(first.values())

    # A README-only push: nothing the threads point at changed, so nothing is resolved.
    fake.push(PID, IID, {**HEAD, "README.md": "# Service\n\nLookups by name.\n"})
    review(fake, db_dsn)
    assert our_threads(fake) == first, "a push that did not touch svc/api.py resolved its threads"
    with psycopg.connect(db_dsn, row_factory=dict_row) as conn:
        states = conn.execute("SELECT thread_state FROM findings WHERE discussion_id IS NOT NULL").fetchall()
    assert {s["thread_state"] for s in states} == {"open"}

    # A push that touches svc/api.py but leaves the token line alone: that thread stays open too.
    fake.push(PID, IID, {**HEAD, "README.md": "# Service\n", "svc/api.py": API + "\n\ndef ping():\n    return 1\n"})
    review(fake, db_dsn)
    assert our_threads(fake) == first

    # The fix: the query takes a parameter. Only the SQL thread is resolved; the token still stands.
    fixed = API.replace(SQL_LINE, '    cur.execute("SELECT * FROM users WHERE name = %s", (name,))')
    fake.push(PID, IID, {**HEAD, "svc/api.py": fixed})
    review(fake, db_dsn)
    after = our_threads(fake)
    assert {h: r for h, r in after.items() if h.startswith("**CRITICAL**")} == {
        h: False for h in first if h.startswith("**CRITICAL**")
    }
    assert all(r for h, r in after.items() if h.startswith("**HIGH**") and "SQL" in h), after
