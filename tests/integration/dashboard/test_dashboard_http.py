"""The dashboard over real HTTP on loopback with a real Postgres: who gets in, what the pages show
(escaped), and what a vote from the page writes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx
import psycopg
import pytest
from dashboard_harness import (
    ENV_TOKEN,
    ENV_TOKEN_NAME,
    HTML,
    SQL_DIFF,
    LiveServer,
    hidden_field,
    login,
    review_through_pipeline,
    rows,
)

from agent.store import models as store_models
from agent.store.db import open_pool
from api.auth import create_api_token
from api.dashboard.session import LOGIN_COOKIE, SESSION_COOKIE, new_session_id, session_id_hash


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as session:
        yield session


def finding_ids(dsn: str, review_id: int) -> list[int]:
    return [r["id"] for r in rows(dsn, "SELECT id FROM findings WHERE review_id = %s ORDER BY id", review_id)]


def vote(client: httpx.Client, finding_id: int, value: str, csrf: str | None) -> httpx.Response:
    data = {"value": value} if csrf is None else {"value": value, "csrf": csrf}
    return client.post(f"/dashboard/findings/{finding_id}/vote", data=data, headers=HTML)


# --- who gets in ---------------------------------------------------------------------------------


def test_without_credentials_a_browser_is_sent_to_login_and_a_script_gets_401(client: httpx.Client) -> None:
    pages = ("/dashboard", "/dashboard/reviews/1", "/dashboard/quality?weeks=4", "/dashboard/models")
    for path in (*pages, "/dashboard/suppressions"):
        page = client.get(path, headers=HTML)
        assert page.status_code == 303
        assert page.headers["location"] == f"/dashboard/login?next={quote(path, safe='/')}"
        assert client.get(path).status_code == 401
    # a vote without a session leaks nothing and writes nothing, nor does a lift
    assert client.post("/dashboard/findings/1/vote", data={"value": "-1"}).status_code == 401
    assert client.post("/dashboard/suppressions/lift", data={"project": "p", "rule": "r"}).status_code == 401


def test_a_wrong_token_is_refused_everywhere(db_dsn: str, client: httpx.Client) -> None:
    refused = login(client, "not-the-token")
    assert refused.status_code == 401 and "Unknown or revoked API token" in refused.text
    assert SESSION_COOKIE not in refused.cookies
    assert client.get("/dashboard", headers=HTML).status_code == 303

    bearer = client.get("/dashboard", headers={"Authorization": "Bearer not-the-token"})
    assert bearer.status_code == 401

    # a hand-made cookie (a guessed id, or the token itself) is no session
    with httpx.Client(base_url=str(client.base_url)) as forged:
        for value in (new_session_id(), ENV_TOKEN):
            forged.cookies.set(SESSION_COOKIE, value, path="/dashboard")
            assert forged.get("/dashboard", headers=HTML).status_code == 303


def test_the_right_token_opens_every_page(db_dsn: str, client: httpx.Client) -> None:
    outcome = review_through_pipeline(db_dsn)
    answer = login(client, ENV_TOKEN)
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard"
    cookie = next(h for h in answer.headers.get_list("set-cookie") if h.startswith(f"{SESSION_COOKIE}="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/dashboard" in cookie
    assert ENV_TOKEN not in cookie  # encoded, never the token as typed

    listing = client.get("/dashboard", headers=HTML)
    assert listing.status_code == 200 and "Orders lookup" in listing.text and "shop/api !12" in listing.text
    assert "default-src 'none'" in listing.headers["content-security-policy"]
    detail = client.get(f"/dashboard/reviews/{outcome.review_id}", headers=HTML)
    assert detail.status_code == 200
    for verified in outcome.verified:
        assert verified.finding.title in detail.text
        assert verified.reason in detail.text
    assert "SQL statement built from request data" in detail.text
    assert client.get("/dashboard/quality", headers=HTML).status_code == 200
    assert client.get("/dashboard/models", headers=HTML).status_code == 200
    assert client.get("/dashboard/suppressions", headers=HTML).status_code == 200
    assert client.get("/dashboard/reviews/999999", headers=HTML).status_code == 404


def test_stored_tokens_work_until_revoked(db_dsn: str, client: httpx.Client) -> None:
    token = create_api_token(db_dsn, "ci-bot")
    assert client.get("/dashboard", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert login(client, token).status_code == 303
    assert client.get("/dashboard", headers=HTML).status_code == 200

    with psycopg.connect(db_dsn) as conn:
        conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE name = 'ci-bot'")
    # the session held the token: revoking it ends the session at once
    assert client.get("/dashboard", headers=HTML).status_code == 303
    assert client.get("/dashboard", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_login_only_redirects_inside_the_dashboard(client: httpx.Client) -> None:
    form = client.get("/dashboard/login?next=//evil.example/x", headers=HTML)
    assert hidden_field(form.text, "next") == "/dashboard"
    answer = client.post(
        "/dashboard/login",
        data={"csrf": hidden_field(form.text, "csrf"), "next": "https://evil.example/", "token": ENV_TOKEN},
        headers=HTML,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard"


# --- what pages show -----------------------------------------------------------------------------


GENERATED_DIFF = (
    "diff --git a/api/orders_pb2.py b/api/orders_pb2.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/api/orders_pb2.py\n@@ -0,0 +1,2 @@\n+# Generated by the protocol buffer compiler.  DO NOT EDIT!\n+X = 1\n"
)


def test_the_review_page_says_what_was_not_analyzed_in_full(db_dsn: str, client: httpx.Client) -> None:
    """Issue 21: coverage is part of the result, on the dashboard too (and a row stored before the
    reasons were a closed set still reads)."""
    complete = review_through_pipeline(db_dsn)
    partial = review_through_pipeline(db_dsn, mr_iid=13, diff_text=SQL_DIFF + GENERATED_DIFF)
    login(client, ENV_TOKEN)
    page = client.get(f"/dashboard/reviews/{partial.review_id}", headers=HTML).text
    assert "Not analyzed in full: 1 changed file(s)." in page
    assert re.search(r"<code>api/orders_pb2.py</code> — <span class=\"tag\">generated</span> machine-written", page)
    assert "secrets scanned only" in page
    assert "Every changed file was analyzed in full." in client.get(f"/dashboard/reviews/{complete.review_id}").text
    with psycopg.connect(db_dsn) as conn:
        conn.execute(
            "UPDATE reviews SET not_reviewed = %s WHERE id = %s",
            ('[{"path": "logo.png", "reason": "binary file"}]', complete.review_id),
        )
    legacy = client.get(f"/dashboard/reviews/{complete.review_id}", headers=HTML).text
    assert '<code>logo.png</code> — <span class="tag">binary</span> binary file' in legacy


def test_model_text_is_escaped(db_dsn: str, client: httpx.Client) -> None:
    outcome = review_through_pipeline(db_dsn, title='<img src=x onerror="alert(1)">')
    first = finding_ids(db_dsn, outcome.review_id)[0]
    with psycopg.connect(db_dsn) as conn:
        conn.execute(
            "UPDATE findings SET body = %s, title = %s, verdict_reason = %s WHERE id = %s",
            ("<script>alert('body')</script> use `<b>bound</b>` params", "<i>title</i>", "<u>why</u>", first),
        )
        conn.execute("UPDATE reviews SET strategy_text = %s", ("plan </pre><script>x()</script>",))
    login(client, ENV_TOKEN)
    listing = client.get("/dashboard", headers=HTML).text
    assert "<img src=x" not in listing and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in listing
    detail = client.get(f"/dashboard/reviews/{outcome.review_id}", headers=HTML).text
    assert "<script>" not in detail
    assert "&lt;script&gt;alert(&#39;body&#39;)&lt;/script&gt;" in detail
    assert "<code>&lt;b&gt;bound&lt;/b&gt;</code>" in detail  # code spans stay code, their text stays text
    assert "&lt;i&gt;title&lt;/i&gt;" in detail and "&lt;u&gt;why&lt;/u&gt;" in detail
    assert "plan &lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;" in detail


def test_quality_page_charts_acceptance_and_counts_comments(db_dsn: str, client: httpx.Client) -> None:
    outcome = review_through_pipeline(db_dsn)
    review_through_pipeline(db_dsn, mr_iid=13, title="Second MR")
    security, tests = (
        next(
            r["id"]
            for r in rows(
                db_dsn, "SELECT id FROM findings WHERE review_id = %s AND category = %s", outcome.review_id, cat
            )
        )
        for cat in ("security", "code_quality")
    )
    with psycopg.connect(db_dsn) as conn:
        for finding_id, value in ((security, 1), (tests, -1)):
            conn.execute(
                "INSERT INTO feedback (finding_id, user_key, source, value) VALUES (%s, 'gitlab:1', 'emoji', %s)",
                (finding_id, value),
            )
    login(client, ENV_TOKEN)
    page = client.get("/dashboard/quality?weeks=4", headers=HTML)
    assert page.status_code == 200
    # one dot per (series, week with votes): by reviewer security 100 %, code_quality 0 %; by project 50 %
    notes = re.findall(r"<circle [^>]*><title>([^<]*)</title>", page.text)
    assert sorted(n.split(",")[0] for n in notes) == ["code_quality", "security", "shop/api"]
    assert any("1 accepted, 0 rejected (100%)" in n for n in notes)
    assert any("0 accepted, 1 rejected (0%)" in n for n in notes)
    assert any(n.startswith("shop/api") and "1 accepted, 1 rejected (50%)" in n for n in notes)
    assert re.search(r"<td>security · security</td><td class=\"num\">1</td><td class=\"num\">0</td>", page.text)
    # per rule: the rejected rule is marked, with its counts
    [voted_rule] = [r["rule"] for r in rows(db_dsn, "SELECT rule FROM findings WHERE id = %s", tests)]
    assert re.search(
        rf"<tr class=\"rejected-rule\"><td><code>{re.escape(voted_rule)}</code></td><td>code quality</td>"
        r"<td class=\"num\">0</td><td class=\"num\">1</td>",
        page.text,
    )
    # comment volume: both MRs, each with its two REAL findings
    for label in ("shop/api !12", "shop/api !13"):
        assert re.search(
            rf"<td>{re.escape(label)}</td>\s*<td class=\"num\">1</td><td class=\"num\">2</td><td class=\"num\">2</td>",
            page.text,
        )
    assert client.get("/dashboard/quality?weeks=0", headers=HTML).status_code == 422


def test_models_page_shows_versions_runs_and_gate_decisions(db_dsn: str, client: httpx.Client) -> None:
    with open_pool(db_dsn) as pool:
        base = store_models.register_version(
            pool, name="strategy-v1", base_model="tiny-llama", metrics={"reward": 0.25}
        )
        store_models.promote(pool, base)
        cand = store_models.register_version(
            pool,
            name="strategy-v2",
            base_model="tiny-llama",
            adapter_path="/models/v2",
            parent_id=base,
            executor="analyzer-only",
        )
        run = store_models.start_run(pool, "eval", {"split": "held-out"})
        store_models.finish_run(
            pool,
            run,
            status="succeeded",
            metrics={"decision": "reject", "candidate": {"reward": 0.2}, "production": {"reward": 0.25}},
            reason="candidate below the margin",
            model_version_id=cand,
        )
        store_models.reject_version(pool, cand)
        skipped = store_models.start_run(pool, "dpo", {})
        store_models.finish_run(pool, skipped, status="skipped", reason="3 pairs, 16 needed")
    login(client, ENV_TOKEN)
    page = client.get("/dashboard/models", headers=HTML).text
    assert "strategy-v1" in page and "strategy-v2" in page and "/models/v2" in page
    assert re.search(r"st-production\">production<.*strategy-v2|strategy-v2.*st-rejected\">rejected<", page, re.S)
    assert '<strong class="gate">reject</strong>' in page
    assert "candidate.reward</span> 0.2" in page and "production.reward</span> 0.25" in page
    assert "3 pairs, 16 needed" in page
    # which reviewers each version was trained for: recorded for v2, not for v1
    assert re.search(r"strategy-v2.*?<td class=\"executor\"[^>]*>analyzer-only reviewers</td>", page, re.S)
    assert re.search(r"strategy-v1.*?<td class=\"executor\"[^>]*>not recorded</td>", page, re.S)


# --- votes -----------------------------------------------------------------------------------------


def test_a_vote_from_the_page_is_a_row_and_the_latest_wins(db_dsn: str, client: httpx.Client) -> None:
    outcome = review_through_pipeline(db_dsn)
    first = finding_ids(db_dsn, outcome.review_id)[0]
    login(client, ENV_TOKEN)
    csrf = hidden_field(client.get(f"/dashboard/reviews/{outcome.review_id}", headers=HTML).text, "csrf")

    answer = vote(client, first, "-1", csrf)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/dashboard/reviews/{outcome.review_id}#finding-{first}"
    assert vote(client, first, "1", csrf).status_code == 303

    [row] = rows(db_dsn, "SELECT * FROM feedback WHERE finding_id = %s", first)
    assert (row["value"], row["source"], row["user_key"]) == (1, "dashboard", f"token:{ENV_TOKEN_NAME}")
    page = client.get(f"/dashboard/reviews/{outcome.review_id}", headers=HTML).text
    # the pressed 👍 now withdraws (value 0) instead of voting again
    assert re.search(
        rf'action="/dashboard/findings/{first}/vote".*?name="value" value="0">\s*<button type="submit" aria-pressed="true"',
        page,
        re.S,
    )
    assert vote(client, first, "0", csrf).status_code == 303
    assert rows(db_dsn, "SELECT value FROM feedback WHERE finding_id = %s", first) == [{"value": 0}]

    assert vote(client, 999_999, "1", csrf).status_code == 404
    assert vote(client, first, "2", csrf).status_code == 422


def test_a_vote_needs_the_sessions_csrf_token(db_dsn: str, client: httpx.Client, live: LiveServer) -> None:
    outcome = review_through_pipeline(db_dsn)
    first = finding_ids(db_dsn, outcome.review_id)[0]
    login(client, ENV_TOKEN)
    with httpx.Client(base_url=live.url) as other:
        login(other, ENV_TOKEN)  # the same token, another session: another CSRF token
        theirs = hidden_field(other.get(f"/dashboard/reviews/{outcome.review_id}", headers=HTML).text, "csrf")
    mine = hidden_field(client.get(f"/dashboard/reviews/{outcome.review_id}", headers=HTML).text, "csrf")
    assert theirs != mine

    for csrf in (None, "", "0" * 64, theirs):
        assert vote(client, first, "-1", csrf).status_code == 403
    assert rows(db_dsn, "SELECT * FROM feedback") == []
    # logging out needs it too
    assert client.post("/dashboard/logout", data={"csrf": ""}, headers=HTML).status_code == 403

    assert vote(client, first, "-1", mine).status_code == 303
    assert len(rows(db_dsn, "SELECT * FROM feedback")) == 1
    # a script with a bearer token sends no ambient credential: no CSRF token needed
    with httpx.Client(base_url=live.url) as script:
        answer = script.post(
            f"/dashboard/findings/{first}/vote", data={"value": "1"}, headers={"Authorization": f"Bearer {ENV_TOKEN}"}
        )
    assert answer.status_code == 303
    assert rows(db_dsn, "SELECT value FROM feedback WHERE finding_id = %s", first) == [{"value": 1}]


def test_login_needs_the_forms_token_and_logout_ends_the_session(client: httpx.Client) -> None:
    # a login posted from elsewhere carries no login cookie
    assert client.post("/dashboard/login", data={"csrf": "x", "token": ENV_TOKEN}, headers=HTML).status_code == 403
    login(client, ENV_TOKEN)
    csrf = hidden_field(client.get("/dashboard", headers=HTML).text, "csrf")
    answer = client.post("/dashboard/logout", data={"csrf": csrf}, headers=HTML)
    assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login"
    assert client.get("/dashboard", headers=HTML).status_code == 303


def test_sessions_live_on_the_server_and_end_there(db_dsn: str, client: httpx.Client, live: LiveServer) -> None:
    """Issue 11: the cookie was the raw API token, still accepted after logout."""
    login(client, ENV_TOKEN)
    session_id = client.cookies[SESSION_COOKIE]
    assert ENV_TOKEN not in session_id
    stored = rows(db_dsn, "SELECT id_hash, token_name, expires_at - created_at AS lifetime FROM dashboard_sessions")
    assert [(r["id_hash"], r["token_name"]) for r in stored] == [(session_id_hash(session_id), ENV_TOKEN_NAME)]
    assert stored[0]["lifetime"] == timedelta(hours=8)

    # logout revokes the session on the server: a copy of the cookie kept elsewhere opens nothing
    csrf = hidden_field(client.get("/dashboard", headers=HTML).text, "csrf")
    assert client.post("/dashboard/logout", data={"csrf": csrf}, headers=HTML).status_code == 303
    with httpx.Client(base_url=live.url) as copy:
        copy.cookies.set(SESSION_COOKIE, session_id, path="/dashboard")
        assert copy.get("/dashboard", headers=HTML).status_code == 303
        assert copy.get("/dashboard").status_code == 401

    # an expired session opens nothing either, whatever the browser kept
    login(client, ENV_TOKEN)
    with psycopg.connect(db_dsn) as conn:
        conn.execute("UPDATE dashboard_sessions SET expires_at = now() - interval '1 second' WHERE revoked_at IS NULL")
    assert client.get("/dashboard", headers=HTML).status_code == 303


def test_the_session_cookie_is_secure_behind_a_tls_proxy(live: LiveServer) -> None:
    # the proxy (here on loopback, uvicorn's default trusted address) says the browser came over https
    via_tls = {**HTML, "X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=live.url) as browser:
        form = browser.get("/dashboard/login", headers=via_tls)
        login_cookie = next(h for h in form.headers.get_list("set-cookie") if h.startswith(f"{LOGIN_COOKIE}="))
        assert "Secure" in login_cookie
        answer = browser.post(
            "/dashboard/login",
            data={"csrf": hidden_field(form.text, "csrf"), "next": "/dashboard", "token": ENV_TOKEN},
            # a browser sends a Secure cookie back over https; this client talks plain http to the "proxy"
            headers={**via_tls, "Cookie": f"{LOGIN_COOKIE}={hidden_field(form.text, 'csrf')}"},
        )
    cookie = next(h for h in answer.headers.get_list("set-cookie") if h.startswith(f"{SESSION_COOKIE}="))
    assert "Secure" in cookie


def test_forms_are_small_and_urlencoded(db_dsn: str, client: httpx.Client) -> None:
    login(client, ENV_TOKEN)
    assert client.post("/dashboard/findings/1/vote", json={"value": 1}, headers=HTML).status_code == 415
    big = client.post("/dashboard/findings/1/vote", data={"value": "1", "pad": "x" * 10_000}, headers=HTML)
    assert big.status_code == 413


def test_quality_window_bounds_the_data(db_dsn: str, client: httpx.Client) -> None:
    outcome = review_through_pipeline(db_dsn)
    old = datetime.now(UTC) - timedelta(weeks=30)
    with psycopg.connect(db_dsn) as conn:
        conn.execute("UPDATE reviews SET created_at = %s", (old,))
        conn.execute("UPDATE findings SET created_at = %s", (old,))
        for finding_id in finding_ids(db_dsn, outcome.review_id):
            conn.execute(
                "INSERT INTO feedback (finding_id, user_key, source, value) VALUES (%s, 'gitlab:1', 'emoji', 1)",
                (finding_id,),
            )
    login(client, ENV_TOKEN)
    recent = client.get("/dashboard/quality?weeks=12", headers=HTML).text
    assert "<circle" not in recent and "No votes in this window yet." in recent and "shop/api !12" not in recent
    wide = client.get("/dashboard/quality?weeks=52", headers=HTML).text
    assert wide.count("<circle") == 3 and "shop/api !12" in wide  # two reviewers, one project
