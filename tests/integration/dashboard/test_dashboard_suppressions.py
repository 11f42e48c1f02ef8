"""Votes act in their own rule and scope, and the dashboard shows and undoes what they silenced
(issue 40), over real HTTP on loopback with a real Postgres.

Three people 👎 one finding from the dashboard. On the next merge request that silences that rule in
that directory only: at 2a83aab the votes were also counted by path, so a different rule's finding in
the same file (a SQL injection) went to a human instead of a thread. /dashboard/suppressions lists
the suppression with who, when and why; a maintainer lifts it with a reason (an authenticated,
CSRF-checked POST), and the rule's findings there count again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dashboard_harness import ENV_TOKEN, HTML, LiveServer, hidden_field, login, review_through_pipeline, rows

from api.auth import create_api_token

ORDERS_AGAIN = """\
diff --git a/shop/orders.py b/shop/orders.py
new file mode 100644
--- /dev/null
+++ b/shop/orders.py
@@ -0,0 +1,9 @@
+import sqlite3
+
+from flask import request
+
+
+def find_refunds(conn: sqlite3.Connection) -> list[tuple[str, int]]:
+    reason = request.args["reason"]
+    query = f"SELECT id, total FROM refunds WHERE reason = '{reason}'"
+    return conn.execute(query).fetchall()
diff --git a/shop/refunds.py b/shop/refunds.py
new file mode 100644
--- /dev/null
+++ b/shop/refunds.py
@@ -0,0 +1,8 @@
+import sqlite3
+
+
+def refund_total(conn: sqlite3.Connection, refund_id: int) -> int:
+    try:
+        return int(conn.execute("SELECT total FROM refunds WHERE id = ?", (refund_id,)).fetchone()[0])
+    except:
+        return -1
diff --git a/billing/ledger.py b/billing/ledger.py
new file mode 100644
--- /dev/null
+++ b/billing/ledger.py
@@ -0,0 +1,8 @@
+import sqlite3
+
+
+def balance(conn: sqlite3.Connection, account: int) -> int:
+    try:
+        return int(conn.execute("SELECT sum(amount) FROM ledger WHERE account = ?", (account,)).fetchone()[0])
+    except:
+        return 0
"""
REFUNDS_ONLY = ORDERS_AGAIN[
    ORDERS_AGAIN.index("diff --git a/shop/refunds.py") : ORDERS_AGAIN.index("diff --git a/billing")
]
PEOPLE = ("ana", "ben", "cy")


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as session:
        yield session


def judged(dsn: str, review_id: int) -> dict[tuple[str, str], dict[str, Any]]:
    found = rows(
        dsn, "SELECT path, category, rule, verdict, verdict_reason FROM findings WHERE review_id = %s", review_id
    )
    return {(f["path"], f["category"]): f for f in found}


def thumbs_down_from_the_dashboard(live: LiveServer, token: str, review_id: int, finding_id: int) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as browser:
        assert login(browser, token).status_code == 303
        csrf = hidden_field(browser.get(f"/dashboard/reviews/{review_id}", headers=HTML).text, "csrf")
        answer = browser.post(
            f"/dashboard/findings/{finding_id}/vote", data={"value": "-1", "csrf": csrf}, headers=HTML
        )
        assert answer.status_code == 303, answer.text


def test_three_thumbs_down_silence_their_rule_in_their_directory_only_and_a_maintainer_lifts_it(
    db_dsn: str, live: LiveServer, client: httpx.Client
) -> None:
    first = review_through_pipeline(db_dsn, mr_iid=12)
    before = judged(db_dsn, first.review_id)
    bare_except = before[("shop/orders.py", "code_quality")]
    assert bare_except["verdict"] == "REAL" and before[("shop/orders.py", "security")]["verdict"] == "REAL"
    [target] = rows(
        db_dsn, "SELECT id FROM findings WHERE review_id = %s AND rule = %s", first.review_id, bare_except["rule"]
    )
    for person in PEOPLE:
        thumbs_down_from_the_dashboard(live, create_api_token(db_dsn, person), first.review_id, target["id"])

    nxt = judged(db_dsn, review_through_pipeline(db_dsn, mr_iid=13, diff_text=ORDERS_AGAIN).review_id)
    # a different rule's finding in the same file is not touched (at 2a83aab: NEEDS_HUMAN_REVIEW, "3 people
    # rejected findings in shop/orders.py before")
    sql = nxt[("shop/orders.py", "security")]
    assert sql["verdict"] == "REAL", sql["verdict_reason"]
    # the rule they rejected is silenced where they rejected it (another file of that directory), with
    # the scope in the reason ...
    silenced = nxt[("shop/refunds.py", "code_quality")]
    assert silenced["rule"] == bare_except["rule"]
    assert (silenced["verdict"], silenced["verdict_reason"]) == (
        "FALSE_POSITIVE",
        f"3 people rejected this rule before ({bare_except['rule']} in shop/** on this project; nobody accepted it)",
    )
    # ... and nowhere else
    elsewhere = nxt[("billing/ledger.py", "code_quality")]
    assert elsewhere["rule"] == bare_except["rule"] and elsewhere["verdict"] == "REAL", elsewhere["verdict_reason"]

    # the dashboard lists it: who, when, why
    assert login(client, ENV_TOKEN).status_code == 303
    listing = client.get("/dashboard/suppressions", headers=HTML)
    assert listing.status_code == 200
    page = listing.text
    assert page.count('<tr class="suppression">') == 1
    assert bare_except["rule"] in page and "shop/**" in page and "shop/api" in page
    assert "token:ana, token:ben, token:cy" in page
    assert "3 people voted 👎, nobody 👍" in page

    # a token of another project can neither see nor lift it
    with httpx.Client(base_url=live.url, timeout=30) as outsider:
        login(outsider, create_api_token(db_dsn, "team-42", projects=["42"]))
        assert '<tr class="suppression">' not in outsider.get("/dashboard/suppressions", headers=HTML).text
        theirs = hidden_field(outsider.get("/dashboard/suppressions", headers=HTML).text, "csrf")
        form = {"csrf": theirs, "project": "shop/api", "rule": bare_except["rule"], "path_scope": "shop/**"}
        refused = outsider.post("/dashboard/suppressions/lift", data={**form, "reason": "no"}, headers=HTML)
        assert refused.status_code == 404
    # nor can a form without the session's CSRF token, or without a reason
    csrf = hidden_field(page, "csrf")
    form = {"project": "shop/api", "rule": bare_except["rule"], "path_scope": "shop/**"}
    assert client.post("/dashboard/suppressions/lift", data={**form, "reason": "x"}, headers=HTML).status_code == 403
    assert client.post("/dashboard/suppressions/lift", data={**form, "csrf": csrf}, headers=HTML).status_code == 422
    assert rows(db_dsn, "SELECT * FROM suppression_lifts") == []

    lifted = client.post(
        "/dashboard/suppressions/lift",
        data={**form, "csrf": csrf, "reason": "we want bare excepts flagged in the shop"},
        headers=HTML,
    )
    assert lifted.status_code == 303 and lifted.headers["location"] == "/dashboard/suppressions?notice=lifted"
    after = client.get(lifted.headers["location"], headers=HTML).text
    assert '<tr class="suppression">' not in after and "No suppression is in force." in after
    assert '<tr class="lift">' in after and "token:alice" in after and "we want bare excepts flagged" in after
    [row] = rows(db_dsn, "SELECT project, rule, path_scope, lifted_by FROM suppression_lifts")
    assert row == {
        "project": "shop/api",
        "rule": bare_except["rule"],
        "path_scope": "shop/**",
        "lifted_by": "token:alice",
    }
    # lifting what is no longer in force is refused
    assert (
        client.post(
            "/dashboard/suppressions/lift", data={**form, "csrf": csrf, "reason": "again"}, headers=HTML
        ).status_code
        == 404
    )

    # the rule's findings in the shop count again
    again = judged(db_dsn, review_through_pipeline(db_dsn, mr_iid=14, diff_text=REFUNDS_ONLY).review_id)
    back = again[("shop/refunds.py", "code_quality")]
    assert back["verdict"] == "REAL", back["verdict_reason"]
