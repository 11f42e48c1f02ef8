"""Helpers for the dashboard tests: the service on loopback, a review made by the real pipeline, and
a browser-like HTTP session that logs in through the form."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg
from fakes.live_server import LiveServer as LiveServer  # re-exported: the tests import it from here
from psycopg.rows import dict_row
from pydantic import SecretStr

from agent.context import ReviewRequest
from agent.pipeline import ReviewOutcome, run_review
from agent.runtime import Runtime
from agent.service_settings import Settings
from agent.session import prepare_database
from agent.store.db import open_pool

ENV_TOKEN = "dashboard-token-for-tests"  # noqa: S105 - loopback test credential
ENV_TOKEN_NAME = "alice"
HTML = {"Accept": "text/html"}

# A merge request that adds a query built with an f-string: the security reviewer's analyzers flag
# it without any model, so the pipeline stores REAL findings to show and vote on.
SQL_DIFF = """\
diff --git a/shop/orders.py b/shop/orders.py
new file mode 100644
--- /dev/null
+++ b/shop/orders.py
@@ -0,0 +1,16 @@
+import sqlite3
+
+from flask import request
+
+
+def find_orders(conn: sqlite3.Connection) -> list[tuple[str, int]]:
+    customer = request.args["customer"]
+    query = f"SELECT id, total FROM orders WHERE customer = '{customer}'"
+    return conn.execute(query).fetchall()
+
+
+def order_total(conn: sqlite3.Connection, order_id: int) -> int:
+    try:
+        return int(conn.execute("SELECT total FROM orders WHERE id = ?", (order_id,)).fetchone()[0])
+    except:
+        return 0
"""


def make_settings(dsn: str) -> Settings:
    return Settings(
        database_url=dsn,
        webhook_secret=SecretStr("hook-secret-for-tests"),
        api_tokens=f"{ENV_TOKEN_NAME}:{ENV_TOKEN}",
        db_pool_size=4,
    )


def review_through_pipeline(
    dsn: str, *, title: str = "Orders lookup", mr_iid: int = 12, diff_text: str = SQL_DIFF
) -> ReviewOutcome:
    """One review of `SQL_DIFF` by the real graph, stored in `dsn` (no model: rules and analyzers)."""
    prepare_database(dsn)
    request = ReviewRequest(source="diff", project="shop/api", mr_iid=mr_iid, title=title, diff_text=diff_text)
    with open_pool(dsn) as pool:
        # the bare except stands for a code-quality thread people vote on; its rule's held-out record
        # (agent.verdicts.track_record) would list it for a person instead, which is not what is tested
        return run_review(Runtime(pool=pool, llm=None, hold_by_track_record=False), request, dsn=dsn)


def rows(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def hidden_field(html: str, name: str) -> str:
    match = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)">', html)
    assert match, f"no hidden {name!r} field in the page"
    return match.group(1)


def login(client: httpx.Client, token: str) -> httpx.Response:
    """Log in through the form like a browser: fetch it (cookie + CSRF), post the token."""
    form = client.get("/dashboard/login", headers=HTML)
    assert form.status_code == 200
    return client.post(
        "/dashboard/login",
        data={"csrf": hidden_field(form.text, "csrf"), "next": "/dashboard", "token": token},
        headers=HTML,
    )
