"""Fuzzing the two endpoints the outside world writes to: POST /webhooks/gitlab and
POST /api/v1/findings/{id}/feedback, in process (Starlette's test client on the real ASGI app) on a
real Postgres.

Hypothesis draws bodies (GitLab hooks with fields deleted, nulled or given other types, huge strings,
any unicode, arbitrary JSON, bytes that are not JSON or not UTF-8, NaN), headers (tokens: none, the
right one, near misses of it, noise; random event names, idempotency keys and content types) and
finding ids (negative, beyond bigint, not numbers). Whatever arrives:

- the answer is never a server error (no 5xx: the database is up, so nothing may look "unavailable");
- a request without the right token is refused and stores nothing (webhook_events, procrastinate_jobs,
  feedback): not a row, not a job;
- a refused request (any 4xx) stores nothing either, even with the right token;
- a hook naming another project than the finding's (by id; a path is only a claim), or naming its
  project by anything but an integer, stores no vote (issue 11);
- a body over the limit, declared or streamed, is a 413 and stores nothing.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
from fakes.gitlab_hooks import emoji_hook, hook_headers, merge_request_hook, note_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from starlette.testclient import TestClient

from agent.service_settings import Settings
from api.app import create_app
from api.auth import create_api_token
from api.worker import QueueConfig, ensure_queue_schema

SECRET = "fuzz-hook-secret"  # noqa: S105 - a loopback test credential
API_TOKEN = "fuzz-api-token"  # noqa: S105
PID, IID = 42, 7
MAX_BODY = 64 * 1024  # small, so that drawn huge strings also reach the size limit
EXAMPLES = 200
STORED = ("webhook_events", "procrastinate_jobs", "feedback")
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # no example files in the working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- what a request is made of -----------------------------------------------------------------

# header-safe text: no CR, LF or NUL (no HTTP stack would pass them), no surrogates
header_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=80)
huge_text = st.builds(lambda s, n: (s or "x") * n, st.text(min_size=1, max_size=3), st.integers(1_000, 40_000))
# what Postgres cannot keep: NUL characters, lone surrogates, integers past int4 and int8
unstorable_text = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfff"])
unstorable = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfff", 2**31, 2**63, -(2**63) - 1, 2**64])
json_leaf = st.one_of(
    unstorable,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    huge_text,
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def near_misses(secret: str) -> st.SearchStrategy[str]:
    """Tokens that differ from `secret` by a little (never by surrounding whitespace, which an HTTP
    stack may strip, making them the real token)."""
    swapped = st.integers(0, len(secret) - 1).flatmap(
        lambda i: (
            st.characters(blacklist_categories=("Cs", "Zs", "Cc"))
            .filter(lambda c: c != secret[i])
            .map(lambda c: secret[:i] + c + secret[i + 1 :])
        )
    )
    return st.one_of(
        st.just(secret[:-1]),
        st.just(secret + "x"),
        st.just(secret.upper()),
        st.just(secret[::-1]),
        st.just(secret + secret),
        swapped,
        header_text.filter(lambda t: t.strip() != secret),
    )


def paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path into nested dicts and lists."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield (*prefix, key)
        yield from paths_in(child, (*prefix, key))


@st.composite
def mutated(draw: st.DrawFn, template: dict[str, Any]) -> dict[str, Any]:
    """A hook with 1-4 fields deleted, nulled, retyped or replaced by any JSON."""
    hook = copy.deepcopy(template)
    for _ in range(draw(st.integers(1, 4))):
        paths = list(paths_in(hook))
        if not paths:
            break
        *parents, key = draw(st.sampled_from(paths))
        container: Any = hook
        for part in parents:
            container = container[part]
        operation = draw(st.sampled_from(["delete", "null", "retype", "replace"]))
        if operation == "delete" and isinstance(container, dict):
            del container[key]
        elif operation == "null":
            container[key] = None
        elif operation == "retype":
            old = container[key]
            container[key] = draw(st.sampled_from([str(old), [old], {"value": old}, not old, -1, 2**64]))
        else:
            container[key] = draw(json_value)
    return hook


def encode(value: Any, *, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


content_types = st.one_of(
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=xyz",
            "",
        ]
    ),
    header_text,
)


def header_bytes(value: str) -> bytes:
    return value.encode("utf-8")


# --- the app and what it stored -------------------------------------------------------------------


@pytest.fixture(scope="module")
def hook_templates() -> Iterator[list[dict[str, Any]]]:
    """Well-formed Merge Request, Note and Emoji hooks, built from a GitLab fake's state."""
    with FakeGitLab() as gitlab:
        gitlab.add_project(PID, "team/service")
        gitlab.add_merge_request(PID, IID, files_base={"a.py": "x = 1\n"}, files_head={"a.py": "x = 2\n"})
        created = httpx.post(
            f"{gitlab.url}/api/v4/projects/{PID}/merge_requests/{IID}/notes",
            json={"body": "a comment"},
            headers={"PRIVATE-TOKEN": BOT_TOKEN},
            timeout=10,
        )
        note_id = int(created.json()["id"])
        yield [
            merge_request_hook(gitlab, PID, IID, action="open"),
            merge_request_hook(gitlab, PID, IID, action="update", oldrev="0" * 40),
            note_hook(gitlab, PID, IID, note_id),
            emoji_hook(gitlab, PID, IID, note_id, name="thumbsdown"),
        ]


@pytest.fixture
def client(db_dsn: str) -> Iterator[TestClient]:
    ensure_queue_schema(db_dsn)
    settings_ = Settings(
        database_url=db_dsn,
        webhook_secret=SecretStr(SECRET),
        api_tokens=f"ci:{API_TOKEN}",
        max_webhook_bytes=MAX_BODY,
        max_request_bytes=MAX_BODY,
        db_pool_size=4,
    )
    app = create_app(settings_, queue_config=QueueConfig(max_attempts=1))
    with TestClient(app, raise_server_exceptions=True) as test_client:
        yield test_client


class Store:
    """Row counts of the tables an outside request could write to, on one connection."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def clear(self) -> None:
        """Each example starts from nothing stored, so that it can be replayed and shrunk alone."""
        for table in STORED:
            self.conn.execute(f"DELETE FROM {table}")  # noqa: S608 - our table names

    def counts(self) -> dict[str, int]:
        row = self.conn.execute(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in STORED)  # noqa: S608 - our table names
        ).fetchone()
        assert row is not None
        return dict(zip(STORED, (int(n) for n in row), strict=True))

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def store(db_dsn: str) -> Iterator[Store]:
    store = Store(db_dsn)
    yield store
    store.close()


@pytest.fixture
def finding_id(db_dsn: str) -> int:
    """One real finding, so that authenticated votes can land somewhere."""
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, status) VALUES ('gitlab', '42', 7, 'done') RETURNING id"
        ).fetchone()
        assert row is not None
        found = conn.execute(
            "INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,"
            " reviewer, verdict, verdict_reason) VALUES (%s, 'fp1', 'a.py', 1, 1, 'security', 'high', 't', 'b',"
            " 'security', 'REAL', 'checked') RETURNING id",
            (row[0],),
        ).fetchone()
    assert found is not None
    return int(found[0])


# --- the webhook ----------------------------------------------------------------------------------


@st.composite
def webhook_requests(draw: st.DrawFn, templates: list[dict[str, Any]]) -> tuple[bytes, dict[str, bytes], bool]:
    """(body, headers, whether the token is the right one). Body, token and headers are each well
    formed or fuzzed, independently, so that every mix is drawn, all-valid ones included."""
    template = draw(st.sampled_from(templates))
    shape = draw(st.sampled_from(["valid hook", "mutated hook", "mutated hook", "any json", "bytes", "nan"]))
    if shape == "valid hook":
        body = encode(template, ascii_only=draw(st.booleans()))
    elif shape == "mutated hook":
        body = encode(draw(mutated(template)), ascii_only=draw(st.booleans()))
    elif shape == "any json":
        body = encode(draw(json_value), ascii_only=draw(st.booleans()))
    elif shape == "bytes":
        body = draw(st.binary(max_size=2048))
    else:  # Python's json reads NaN and Infinity; Postgres' jsonb does not
        body = encode(template, ascii_only=True).replace(b"{", b'{"x": Infinity, "y": NaN, ', 1)
    token = draw(st.one_of(st.just(SECRET), st.none(), near_misses(SECRET)))
    headers = hook_headers("Merge Request Hook", token=None)
    if draw(st.booleans()):
        headers["Content-Type"] = draw(content_types)
        headers["X-Gitlab-Event"] = draw(header_text)
        headers["Idempotency-Key"] = draw(st.one_of(header_text, huge_text.map(lambda s: s[:4000])))
        headers["X-Gitlab-Webhook-UUID"] = draw(header_text)
    if token is not None:
        headers["X-Gitlab-Token"] = token
    return body, {name: header_bytes(value) for name, value in headers.items()}, token == SECRET


def test_fuzzed_webhooks_never_fail_and_unauthenticated_ones_store_nothing(
    client: TestClient, store: Store, hook_templates: list[dict[str, Any]]
) -> None:
    seen: dict[int, int] = {}
    valid_headers = {k: header_bytes(v) for k, v in hook_headers("Merge Request Hook", token=SECRET).items()}
    nul_title = copy.deepcopy(hook_templates[0])
    nul_title["object_attributes"]["title"] = "a\x00b"
    huge_iid = copy.deepcopy(hook_templates[0])
    huge_iid["object_attributes"]["iid"] = 2**40

    @FUZZ
    @given(request=webhook_requests(hook_templates))
    # found by this test: values Postgres cannot keep were answered 503 "database unavailable"
    @example(request=(encode(nul_title, ascii_only=True), valid_headers, True))
    @example(request=(encode(huge_iid, ascii_only=True), valid_headers, True))
    def one(request: tuple[bytes, dict[str, bytes], bool]) -> None:
        body, headers, authenticated = request
        store.clear()
        before = store.counts()
        answer = client.post("/webhooks/gitlab", content=body, headers=headers)
        after = store.counts()
        seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (answer.status_code, answer.text[:300])
        assert answer.headers["content-type"].startswith("application/json")
        if not authenticated:
            assert answer.status_code in (401, 413), answer.text[:300]
            assert after == before
        if answer.status_code >= 400:
            assert after == before, f"a refused request ({answer.status_code}) stored rows"
        else:
            assert after["webhook_events"] == before["webhook_events"] + 1  # every accepted delivery is on record

    one()
    # the run reached both sides of the gate and past it
    assert seen.get(401, 0) > 0 and any(200 <= code < 300 for code in seen), seen


# --- the feedback API -----------------------------------------------------------------------------


@st.composite
def feedback_requests(draw: st.DrawFn, finding: int, stored_token: str) -> tuple[str, bytes, dict[str, bytes], bool]:
    """(path, body, headers, whether the bearer token is a valid one). Id, body, token and content
    type are each well formed or fuzzed, independently."""
    raw_id: object = finding
    if draw(st.booleans()):
        raw_id = draw(
            st.one_of(
                st.integers(min_value=-(2**70), max_value=2**70),
                st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, 10**30]),
                header_text,
            )
        )
    path = f"/api/v1/findings/{quote(str(raw_id), safe='')}/feedback"
    valid: dict[str, Any] = {
        "value": draw(st.sampled_from([1, -1])),
        "comment": draw(st.one_of(st.none(), st.text(max_size=200), unstorable_text)),
    }
    if draw(st.booleans()):
        valid["user"] = draw(st.one_of(st.none(), st.text(max_size=220), unstorable_text))
    shape = draw(st.sampled_from(["valid", "valid", "mutated", "any json", "bytes"]))
    if shape == "valid":
        body = encode(valid, ascii_only=draw(st.booleans()))
    elif shape == "mutated":
        body = encode(draw(mutated(valid)), ascii_only=draw(st.booleans()))
    elif shape == "any json":
        body = encode(draw(json_value), ascii_only=True)
    else:
        body = draw(st.binary(max_size=512))
    token = draw(st.sampled_from([API_TOKEN, stored_token]))
    authorization = draw(
        st.sampled_from([f"Bearer {token}", f"bearer {token}"])
        if draw(st.booleans())
        else st.one_of(
            st.none(),
            st.sampled_from(["Bearer", "Bearer ", f"Basic {token}", token, f"Token {token}"]),
            near_misses(token).map(lambda t: f"Bearer {t}"),
            header_text,
        )
    )
    headers = {"content-type": draw(st.one_of(st.just("application/json"), content_types))}
    if authorization is not None:
        headers["authorization"] = authorization
    authenticated = authorization in (f"Bearer {token}", f"bearer {token}")
    return path, body, {name: header_bytes(value) for name, value in headers.items()}, authenticated


def test_fuzzed_feedback_never_fails_and_unauthenticated_votes_store_nothing(
    client: TestClient, store: Store, db_dsn: str, finding_id: int
) -> None:
    stored_token = create_api_token(db_dsn, "fuzz-stored")
    seen: dict[int, int] = {}
    nul_comment = json.dumps({"value": 1, "comment": "a\x00b"}).encode()
    valid_headers = {"authorization": f"Bearer {API_TOKEN}".encode(), "content-type": b"application/json"}

    @FUZZ
    @given(request=feedback_requests(finding_id, stored_token))
    # found by this test: a NUL in the comment was a 500
    @example(request=(f"/api/v1/findings/{finding_id}/feedback", nul_comment, valid_headers, True))
    # a vote that must be stored, whatever the draws (a valid, authorized request is about 1 in 40 of them)
    @example(request=(f"/api/v1/findings/{finding_id}/feedback", b'{"value": -1}', valid_headers, True))
    def one(request: tuple[str, bytes, dict[str, bytes], bool]) -> None:
        path, body, headers, authenticated = request
        store.clear()
        before = store.counts()
        answer = client.post(path, content=body, headers=headers)
        after = store.counts()
        seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (answer.status_code, answer.text[:300])
        if not authenticated:
            # 413: a body over the limit is refused before the token is even looked at
            assert answer.status_code in (400, 401, 404, 405, 413, 422), answer.text[:300]
            assert after == before
        if answer.status_code != 200:
            assert after == before, f"a refused vote ({answer.status_code}) stored rows"
        else:
            assert after["feedback"] == before["feedback"] + 1

    one()
    assert seen.get(401, 0) > 0 and seen.get(200, 0) > 0, seen


# --- across projects (issue 11) -------------------------------------------------------------------


@pytest.fixture
def our_thread(db_dsn: str, hook_templates: list[dict[str, Any]]) -> int:
    """A finding of project 42's review posted as the note the templates' emoji and reply name."""
    emoji = hook_templates[3]
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, status) VALUES ('gitlab', %s, 7, 'done') RETURNING id",
            (str(PID),),
        ).fetchone()
        assert row is not None
        found = conn.execute(
            "INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,"
            " reviewer, verdict, verdict_reason, note_id, discussion_id) VALUES (%s, 'fp1', 'a.py', 1, 1,"
            " 'security', 'high', 't', 'b', 'security', 'REAL', 'checked', %s, %s) RETURNING id",
            (row[0], emoji["object_attributes"]["awardable_id"], emoji["note"]["discussion_id"]),
        ).fetchone()
    assert found is not None
    return int(found[0])


project_ids = st.one_of(
    st.just(PID),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([str(PID), float(PID), True, None, [PID], {"id": PID}]),
)
claimed_paths = st.sampled_from(["team/service", "other/project", "", "42", None])


def test_fuzzed_hooks_from_other_projects_never_vote(
    client: TestClient, store: Store, hook_templates: list[dict[str, Any]], our_thread: int
) -> None:
    headers = {k: header_bytes(v) for k, v in hook_headers("Emoji Hook", token=SECRET).items()}
    seen: dict[int, int] = {}

    @FUZZ
    @given(
        template=st.sampled_from(hook_templates[2:]),  # the reply and the emoji on our note
        project_id=project_ids,
        path=claimed_paths,
        top_level_id=st.one_of(st.none(), project_ids),
    )
    @example(template=hook_templates[3], project_id=PID, path="team/service", top_level_id=PID)  # ours: counts
    @example(template=hook_templates[3], project_id=1, path="team/service", top_level_id=1)  # the issue's
    def one(template: dict[str, Any], project_id: object, path: str | None, top_level_id: object) -> None:
        hook = copy.deepcopy(template)
        hook["project"]["id"] = project_id
        hook["project"]["path_with_namespace"] = path
        if top_level_id is None:
            hook.pop("project_id", None)
        else:
            hook["project_id"] = top_level_id
        store.clear()
        headers["Idempotency-Key"] = str(uuid.uuid4()).encode()
        answer = client.post("/webhooks/gitlab", content=encode(hook, ascii_only=True), headers=headers)
        seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, answer.text[:300]
        ours = type(project_id) is int and project_id == PID
        if not ours:
            assert store.counts()["feedback"] == 0, (project_id, path, answer.text[:300])
        if answer.status_code >= 400:
            assert store.counts() == dict.fromkeys(STORED, 0)

    one()
    assert seen.get(400, 0) > 0 and seen.get(200, 0) > 0, seen


# --- oversized bodies -----------------------------------------------------------------------------


def test_fuzzed_oversized_bodies_are_413_and_store_nothing(client: TestClient, store: Store, finding_id: int) -> None:
    hook = {k: header_bytes(v) for k, v in hook_headers("Merge Request Hook", token=SECRET).items()}
    vote = {"authorization": f"Bearer {API_TOKEN}".encode(), "content-type": b"application/json"}

    @FUZZ
    @given(
        route=st.sampled_from(["/webhooks/gitlab", f"/api/v1/findings/{finding_id}/feedback", "/dashboard/login"]),
        size=st.integers(min_value=MAX_BODY + 1, max_value=4 * MAX_BODY),
        streamed=st.booleans(),
        authenticated=st.booleans(),
    )
    def one(route: str, size: int, streamed: bool, authenticated: bool) -> None:
        store.clear()
        body = json.dumps({"value": 1, "object_kind": "merge_request", "pad": "x" * size}).encode()
        headers = (hook if route.startswith("/webhooks") else vote) if authenticated else {}
        content: Any = iter([body[i : i + 8192] for i in range(0, len(body), 8192)]) if streamed else body
        answer = client.post(route, content=content, headers=headers)
        if not streamed:  # refused by its Content-Length before anything else looks at it
            assert answer.status_code == 413 and "exceeds" in answer.json()["error"], answer.text[:200]
        else:  # refused while streaming, or before the body is read at all (no token, not a form)
            assert answer.status_code in (401, 413, 415) and "error" in answer.json(), answer.text[:200]
            assert answer.status_code == 413 or not authenticated or route.startswith("/dashboard")
        assert store.counts() == dict.fromkeys(STORED, 0)

    one()
