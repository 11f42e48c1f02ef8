"""A GitLab-compatible REST server on loopback that the real python-gitlab client talks to.

It serves the part of GitLab's v4 API reviewloop uses, in GitLab's documented response shapes:
projects, the current user, merge requests, their versions and paginated diffs, raw files and the
tree at a commit, discussions (positioned or not, replies, resolve), notes (create, edit, list) and
award emoji on notes. State lives in memory and is seeded by the test (`add_project`,
`add_merge_request`, `push`). It behaves like GitLab where a client can get it wrong:

- positions are validated against the newest version's diff (SHAs, paths, added/context/removed
  line rules) and a bad one is answered 400 with GitLab's `line_code` message;
- lists are paginated with `X-Page`, `X-Next-Page`, `X-Total`, `Link` (python-gitlab follows `Link`);
- `PRIVATE-TOKEN` is checked (401 otherwise) and only a note's author may edit it (403);
- `fail_next` injects 429/5xx answers, with `Retry-After` if asked.

Project ids in paths may be numbers or URL-encoded paths (`group%2Fproject`), and file paths are
URL-encoded too, so routing reads the raw request path rather than Starlette's decoded one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from fakes.gitlab_diffs import DiffEntry, FileContent, diff_entries, is_binary

API_PREFIX = "/api/v4"
DEFAULT_PER_PAGE = 20  # GitLab's default page size
MAX_PER_PAGE = 100  # GitLab's cap on per_page
BOT_TOKEN = "bot-token"  # noqa: S105 - a test credential for a loopback fake
BOT_USER_ID = 99
HUMAN_USER_ID = 7
LINE_CODE_ERROR = '400 Bad request - Note {:line_code=>["can\'t be blank", "must be a valid line code"]}'

Handler = Callable[["_Call"], Response]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _sha(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode(), usedforsecurity=False).hexdigest()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status)


@dataclass
class User:
    id: int
    username: str
    name: str
    bot: bool = False


@dataclass
class Fault:
    pattern: re.Pattern[str]
    status: int
    remaining: int | None  # None: every matching request fails
    retry_after: int | str | None  # seconds, or an HTTP date as text
    method: str | None


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    status: int


@dataclass
class Version:
    id: int
    base_sha: str
    start_sha: str
    head_sha: str
    created_at: str
    entries: list[DiffEntry]


@dataclass
class Note:
    id: int
    discussion_id: str
    body: str
    author: User
    type: str | None  # None (individual note), "DiscussionNote", "DiffNote"
    created_at: str
    updated_at: str
    system: bool = False
    resolvable: bool = False
    resolved: bool = False
    resolved_by: User | None = None
    resolved_at: str | None = None
    position: dict[str, Any] | None = None
    awards: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Discussion:
    id: str
    individual_note: bool
    notes: list[Note]


@dataclass
class MergeRequest:
    id: int
    iid: int
    project_id: int
    title: str
    description: str
    draft: bool
    author: User
    source_branch: str
    target_branch: str
    created_at: str
    versions: list[Version]  # newest first, as GitLab lists them
    diff_refs_ready: bool = True
    state: str = "opened"
    discussions: list[Discussion] = field(default_factory=list)

    @property
    def latest(self) -> Version:
        return self.versions[0]


@dataclass
class Project:
    id: int
    path_with_namespace: str
    default_branch: str
    commits: dict[str, dict[str, FileContent]] = field(default_factory=dict)
    merge_requests: dict[int, MergeRequest] = field(default_factory=dict)


@dataclass
class _Call:
    """One request as the route handlers see it."""

    request: Request
    method: str
    path: str  # raw, still URL-encoded, without the /api/v4 prefix
    params: dict[str, str]  # route groups, decoded
    query: dict[str, str]
    body: dict[str, Any]
    user: User


class FakeGitLab:
    """An in-memory GitLab served over HTTP on 127.0.0.1. Use as a context manager or call start/stop."""

    def __init__(
        self,
        *,
        max_per_page: int = MAX_PER_PAGE,
        max_diff_bytes: int = 100_000,
        max_diff_files: int | None = None,
    ) -> None:
        """`max_diff_files` plays GitLab's "maximum diff files" limit: a version with more changed
        files is in state "overflow", reports `real_size` "N+" and `/diffs` lists only the first N."""
        self.max_per_page = max_per_page
        self.max_diff_bytes = max_diff_bytes
        self.max_diff_files = max_diff_files
        self.bot = User(BOT_USER_ID, "reviewloop-bot", "reviewloop", bot=True)
        self.human = User(HUMAN_USER_ID, "alice", "Alice Example")
        self.tokens: dict[str, User] = {BOT_TOKEN: self.bot, "alice-token": self.human}
        self.projects: dict[int, Project] = {}
        self.requests: list[RecordedRequest] = []
        self._faults: list[Fault] = []
        self._lock = threading.RLock()
        self._ids = itertools.count(1000)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self._routes = self._route_table()

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeGitLab:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(
            self._asgi, log_level="warning", lifespan="off", ws="none", http="h11", interface="asgi3"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake GitLab server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> FakeGitLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- seeding and inspection (the test's side) --------------------------------------------------

    def add_project(self, project_id: int, path_with_namespace: str, *, default_branch: str = "main") -> Project:
        with self._lock:
            project = Project(project_id, path_with_namespace, default_branch)
            self.projects[project_id] = project
            return project

    def _commit(self, project: Project, files: Mapping[str, FileContent], parent: str) -> str:
        sha = _sha(parent, str(next(self._ids)), *(f"{p}={c!r}" for p, c in sorted(files.items())))
        project.commits[sha] = dict(files)
        return sha

    def _version(self, project: Project, base_sha: str, head_sha: str, **diff_flags: Any) -> Version:
        entries = diff_entries(
            project.commits[base_sha],
            project.commits[head_sha],
            max_diff_bytes=self.max_diff_bytes,
            **diff_flags,
        )
        return Version(next(self._ids), base_sha, base_sha, head_sha, _now(), entries)

    def add_merge_request(
        self,
        project_id: int,
        iid: int,
        *,
        files_base: Mapping[str, FileContent],
        files_head: Mapping[str, FileContent],
        title: str = "A change",
        description: str = "",
        draft: bool = False,
        author: User | None = None,
        source_branch: str = "feature",
        target_branch: str = "main",
        too_large: set[str] | frozenset[str] = frozenset(),
        collapsed: set[str] | frozenset[str] = frozenset(),
        generated: set[str] | frozenset[str] = frozenset(),
        silently_empty: set[str] | frozenset[str] = frozenset(),
        diff_refs_ready: bool = True,
    ) -> MergeRequest:
        """A merge request whose target is `files_base` and whose source head is `files_head`.
        `diff_refs_ready=False` answers `diff_refs: null`, as GitLab does right after creation."""
        with self._lock:
            project = self.projects[project_id]
            base_sha = self._commit(project, files_base, "root")
            head_sha = self._commit(project, files_head, base_sha)
            version = self._version(
                project,
                base_sha,
                head_sha,
                too_large=too_large,
                collapsed=collapsed,
                generated=generated,
                silently_empty=silently_empty,
            )
            mr = MergeRequest(
                id=next(self._ids),
                iid=iid,
                project_id=project_id,
                title=title,
                description=description,
                draft=draft,
                author=author or self.human,
                source_branch=source_branch,
                target_branch=target_branch,
                created_at=_now(),
                versions=[version],
                diff_refs_ready=diff_refs_ready,
            )
            project.merge_requests[iid] = mr
            return mr

    def push(
        self,
        project_id: int,
        iid: int,
        new_files_head: Mapping[str, FileContent],
        *,
        too_large: set[str] | frozenset[str] = frozenset(),
        collapsed: set[str] | frozenset[str] = frozenset(),
    ) -> str:
        """New commits on the source branch: a new head and a new MR version. Returns the head SHA."""
        with self._lock:
            project = self.projects[project_id]
            mr = project.merge_requests[iid]
            base_sha = mr.latest.base_sha
            head_sha = self._commit(project, new_files_head, mr.latest.head_sha)
            mr.versions.insert(0, self._version(project, base_sha, head_sha, too_large=too_large, collapsed=collapsed))
            mr.diff_refs_ready = True
            return head_sha

    def set_draft(self, project_id: int, iid: int, draft: bool) -> None:
        with self._lock:
            self.projects[project_id].merge_requests[iid].draft = draft

    def fail_next(
        self,
        path_regex: str,
        status: int,
        count: int | None = 1,
        retry_after: int | str | None = None,
        *,
        method: str | None = None,
    ) -> None:
        """The next `count` requests whose path (after /api/v4, URL-encoded) matches get `status`.
        `count=None` fails every matching request until `clear_faults`."""
        with self._lock:
            self._faults.append(Fault(re.compile(path_regex), status, count, retry_after, method))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def merge_request(self, project_id: int, iid: int) -> MergeRequest:
        return self.projects[project_id].merge_requests[iid]

    def discussions(self, project_id: int, iid: int) -> list[Discussion]:
        with self._lock:
            return list(self.merge_request(project_id, iid).discussions)

    def notes(self, project_id: int, iid: int) -> list[Note]:
        """Every note on the MR in creation order."""
        with self._lock:
            notes = [n for d in self.merge_request(project_id, iid).discussions for n in d.notes]
            return sorted(notes, key=lambda n: n.id)

    def find_note(self, project_id: int, iid: int, note_id: int) -> Note:
        for note in self.notes(project_id, iid):
            if note.id == note_id:
                return note
        raise KeyError(note_id)

    def reply(self, project_id: int, iid: int, discussion_id: str, body: str, *, user: User | None = None) -> Note:
        """A person answers in a thread (what a Note Hook then reports)."""
        with self._lock:
            discussion = self._discussion(self.merge_request(project_id, iid), discussion_id)
            assert discussion is not None, discussion_id
            return self._add_reply(discussion, body, user or self.human)

    def award(
        self, project_id: int, iid: int, note_id: int, name: str = "thumbsup", *, user: User | None = None
    ) -> dict[str, Any]:
        """A person reacts to a note with an emoji (what an Emoji Hook then reports)."""
        with self._lock:
            note = self.find_note(project_id, iid, note_id)
            return self._add_award(note, name, user or self.human)

    def resolve_as(self, project_id: int, iid: int, discussion_id: str, *, user: User | None = None) -> None:
        with self._lock:
            discussion = self._discussion(self.merge_request(project_id, iid), discussion_id)
            assert discussion is not None, discussion_id
            self._set_resolved(discussion, True, user or self.human)

    # --- JSON shapes -------------------------------------------------------------------------------

    def user_json(self, user: User) -> dict[str, Any]:
        return {
            "id": user.id,
            "username": user.username,
            "name": user.name,
            "state": "active",
            "locked": False,
            "avatar_url": None,
            "web_url": f"{self.url}/{user.username}",
        }

    def project_json(self, project: Project) -> dict[str, Any]:
        namespace, _, name = project.path_with_namespace.rpartition("/")
        return {
            "id": project.id,
            "description": None,
            "name": name,
            "name_with_namespace": f"{namespace} / {name}" if namespace else name,
            "path": name,
            "path_with_namespace": project.path_with_namespace,
            "created_at": "2024-01-01T00:00:00.000Z",
            "default_branch": project.default_branch,
            "tag_list": [],
            "topics": [],
            "ssh_url_to_repo": f"git@127.0.0.1:{project.path_with_namespace}.git",
            "http_url_to_repo": f"{self.url}/{project.path_with_namespace}.git",
            "web_url": f"{self.url}/{project.path_with_namespace}",
            "visibility": "private",
            "namespace": {
                "id": 1,
                "name": namespace,
                "path": namespace,
                "kind": "group",
                "full_path": namespace,
            },
        }

    def merge_request_json(self, mr: MergeRequest) -> dict[str, Any]:
        project = self.projects[mr.project_id]
        latest = mr.latest
        title = f"Draft: {mr.title}" if mr.draft and not mr.title.startswith("Draft:") else mr.title
        refs = {"base_sha": latest.base_sha, "head_sha": latest.head_sha, "start_sha": latest.start_sha}
        return {
            "id": mr.id,
            "iid": mr.iid,
            "project_id": mr.project_id,
            "title": title,
            "description": mr.description,
            "state": mr.state,
            "created_at": mr.created_at,
            "updated_at": latest.created_at,
            "merged_by": None,
            "merge_user": None,
            "merged_at": None,
            "closed_by": None,
            "closed_at": None,
            "target_branch": mr.target_branch,
            "source_branch": mr.source_branch,
            "user_notes_count": sum(len(d.notes) for d in mr.discussions),
            "upvotes": 0,
            "downvotes": 0,
            "author": self.user_json(mr.author),
            "assignees": [],
            "assignee": None,
            "reviewers": [],
            "source_project_id": mr.project_id,
            "target_project_id": mr.project_id,
            "labels": [],
            "draft": mr.draft,
            "work_in_progress": mr.draft,
            "milestone": None,
            "merge_when_pipeline_succeeds": False,
            "merge_status": "can_be_merged",
            "detailed_merge_status": "draft_status" if mr.draft else "mergeable",
            "sha": latest.head_sha,
            "merge_commit_sha": None,
            "squash_commit_sha": None,
            "discussion_locked": None,
            "should_remove_source_branch": None,
            "force_remove_source_branch": False,
            "reference": f"!{mr.iid}",
            "references": {
                "short": f"!{mr.iid}",
                "relative": f"!{mr.iid}",
                "full": f"{project.path_with_namespace}!{mr.iid}",
            },
            "web_url": f"{self.url}/{project.path_with_namespace}/-/merge_requests/{mr.iid}",
            "time_stats": {"time_estimate": 0, "total_time_spent": 0},
            "squash": False,
            "task_completion_status": {"count": 0, "completed_count": 0},
            "has_conflicts": False,
            "blocking_discussions_resolved": all(
                d.notes[0].resolved or not d.notes[0].resolvable for d in mr.discussions
            ),
            "diff_refs": refs if mr.diff_refs_ready else None,
            "changes_count": str(len(latest.entries)),
        }

    def version_json(self, mr: MergeRequest, version: Version, *, with_diffs: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": version.id,
            "head_commit_sha": version.head_sha,
            "base_commit_sha": version.base_sha,
            "start_commit_sha": version.start_sha,
            "created_at": version.created_at,
            "merge_request_id": mr.id,
            "state": "overflow" if self._overflows(version) else "collected",
            "real_size": f"{len(self._listed(version))}+" if self._overflows(version) else str(len(version.entries)),
            "patch_id_sha": _sha("patch", version.head_sha),
        }
        if with_diffs:
            out["commits"] = []
            out["diffs"] = [e.to_json() for e in self._listed(version)]
        return out

    def _overflows(self, version: Version) -> bool:
        return self.max_diff_files is not None and len(version.entries) > self.max_diff_files

    def _listed(self, version: Version) -> list[DiffEntry]:
        """The entries GitLab lists: all of them, or the first `max_diff_files` of an overflow."""
        return version.entries[: self.max_diff_files] if self._overflows(version) else version.entries

    def note_json(self, mr: MergeRequest, note: Note) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": note.id,
            "type": note.type,
            "body": note.body,
            "attachment": None,
            "author": self.user_json(note.author),
            "created_at": note.created_at,
            "updated_at": note.updated_at,
            "system": note.system,
            "noteable_id": mr.id,
            "noteable_type": "MergeRequest",
            "project_id": mr.project_id,
            "noteable_iid": mr.iid,
            "commit_id": None,
            "resolvable": note.resolvable,
            "confidential": False,
            "internal": False,
            "imported": False,
            "imported_from": "none",
        }
        if note.resolvable:
            out["resolved"] = note.resolved
            out["resolved_by"] = self.user_json(note.resolved_by) if note.resolved_by else None
            out["resolved_at"] = note.resolved_at
        if note.position is not None:
            out["position"] = note.position
        return out

    def discussion_json(self, mr: MergeRequest, discussion: Discussion) -> dict[str, Any]:
        return {
            "id": discussion.id,
            "individual_note": discussion.individual_note,
            "notes": [self.note_json(mr, n) for n in discussion.notes],
        }

    # --- HTTP plumbing -----------------------------------------------------------------------------

    def _route_table(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        p = r"/projects/(?P<project>[^/]+)"
        mr = p + r"/merge_requests/(?P<iid>\d+)"
        table: list[tuple[str, str, Handler]] = [
            ("GET", r"/user", self._get_user),
            ("GET", p, self._get_project),
            ("GET", p + r"/repository/files/(?P<file>[^/]+)/raw", self._get_raw_file),
            ("GET", p + r"/repository/files/(?P<file>[^/]+)", self._get_file),
            ("GET", p + r"/repository/tree", self._get_tree),
            ("GET", p + r"/repository/compare", self._compare),
            ("GET", mr, self._get_mr),
            ("GET", mr + r"/versions", self._list_versions),
            ("GET", mr + r"/versions/(?P<version>\d+)", self._get_version),
            ("GET", mr + r"/diffs", self._list_diffs),
            ("GET", mr + r"/discussions", self._list_discussions),
            ("POST", mr + r"/discussions", self._create_discussion),
            ("GET", mr + r"/discussions/(?P<discussion>[0-9a-f]+)", self._get_discussion),
            ("PUT", mr + r"/discussions/(?P<discussion>[0-9a-f]+)", self._resolve_discussion),
            ("POST", mr + r"/discussions/(?P<discussion>[0-9a-f]+)/notes", self._reply_discussion),
            ("GET", mr + r"/notes", self._list_notes),
            ("POST", mr + r"/notes", self._create_note),
            ("GET", mr + r"/notes/(?P<note>\d+)", self._get_note),
            ("PUT", mr + r"/notes/(?P<note>\d+)", self._edit_note),
            ("GET", mr + r"/notes/(?P<note>\d+)/award_emoji", self._list_awards),
            ("POST", mr + r"/notes/(?P<note>\d+)/award_emoji", self._create_award),
        ]
        return [(m, re.compile(rx + r"/?"), h) for m, rx, h in table]

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every request to `_dispatch`, without Starlette's router: its path pattern stops at a newline,
        and GitLab serves a file whose name holds one (`files/bad%0Aname.py/raw`)."""
        if scope["type"] != "http":
            return
        response = await self._dispatch(Request(scope, receive))
        await response(scope, receive, send)

    async def _dispatch(self, request: Request) -> Response:
        raw = request.scope.get("raw_path", b"").decode("latin-1").split("?", 1)[0]
        path = raw[len(API_PREFIX) :] if raw.startswith(API_PREFIX) else raw
        query = dict(parse_qsl(request.url.query, keep_blank_values=True))
        body = await self._body(request)
        response = self._answer(request, path, query, body)
        with self._lock:
            self.requests.append(RecordedRequest(request.method, path, query, response.status_code))
        return response

    async def _body(self, request: Request) -> dict[str, Any]:
        if request.method not in ("POST", "PUT"):
            return {}
        raw = await request.body()
        if not raw:
            return {}
        if request.headers.get("content-type", "").startswith("application/json"):
            data = json.loads(raw)
            return data if isinstance(data, dict) else {}
        return dict(parse_qsl(raw.decode(), keep_blank_values=True))

    def _answer(self, request: Request, path: str, query: dict[str, str], body: dict[str, Any]) -> Response:
        fault = self._take_fault(request.method, path)
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            return JSONResponse({"message": f"{fault.status} fault injected"}, fault.status, headers=headers)
        user = self._authenticate(request)
        if user is None:
            return _error(401, "401 Unauthorized")
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match and method == request.method:
                params = {k: unquote(v) for k, v in match.groupdict().items()}
                with self._lock:
                    return handler(_Call(request, request.method, path, params, query, body, user))
        return _error(404, "404 Not Found")

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method not in (None, method) or not fault.pattern.search(path):
                    continue
                if fault.remaining is None:
                    return fault
                if fault.remaining > 0:
                    fault.remaining -= 1
                    return fault
        return None

    def _authenticate(self, request: Request) -> User | None:
        given = request.headers.get("private-token")
        if given is None:
            auth = request.headers.get("authorization", "")
            given = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
        if given is None:
            return None
        for token, user in self.tokens.items():
            if hmac.compare_digest(token.encode(), given.encode()):
                return user
        return None

    def _paginate(self, call: _Call, items: list[Any]) -> Response:
        """A page of `items` with GitLab's offset-pagination headers (python-gitlab follows `Link`)."""
        try:
            per_page = min(max(int(call.query.get("per_page", DEFAULT_PER_PAGE)), 1), self.max_per_page)
            page = max(int(call.query.get("page", 1)), 1)
        except ValueError:
            return _error(400, "400 Bad request - page/per_page is invalid")
        total = len(items)
        total_pages = max((total + per_page - 1) // per_page, 1)
        chunk = items[(page - 1) * per_page : page * per_page]
        base = f"{self.url}{API_PREFIX}{call.path}"

        def link(to_page: int) -> str:
            query = {**call.query, "page": str(to_page), "per_page": str(per_page)}
            return f"{base}?{urlencode(query)}"

        links = []
        if page < total_pages:
            links.append(f'<{link(page + 1)}>; rel="next"')
        if page > 1:
            links.append(f'<{link(page - 1)}>; rel="prev"')
        links.append(f'<{link(1)}>; rel="first"')
        links.append(f'<{link(total_pages)}>; rel="last"')
        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(total),
            "X-Total-Pages": str(total_pages),
            "X-Next-Page": str(page + 1) if page < total_pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
            "Link": ", ".join(links),
        }
        return JSONResponse(chunk, headers=headers)

    # --- lookups -----------------------------------------------------------------------------------

    def _project(self, ref: str) -> Project | None:
        if ref.isdigit():
            return self.projects.get(int(ref))
        for project in self.projects.values():
            if project.path_with_namespace == ref:
                return project
        return None

    def _mr(self, call: _Call) -> MergeRequest | Response:
        project = self._project(call.params["project"])
        if project is None:
            return _error(404, "404 Project Not Found")
        mr = project.merge_requests.get(int(call.params["iid"]))
        return mr if mr is not None else _error(404, "404 Not found")

    @staticmethod
    def _discussion(mr: MergeRequest, discussion_id: str) -> Discussion | None:
        return next((d for d in mr.discussions if d.id == discussion_id), None)

    @staticmethod
    def _note(mr: MergeRequest, note_id: int) -> Note | None:
        return next((n for d in mr.discussions for n in d.notes if n.id == note_id), None)

    # --- handlers ----------------------------------------------------------------------------------

    def _get_user(self, call: _Call) -> Response:
        return JSONResponse(
            {**self.user_json(call.user), "bot": call.user.bot, "email": f"{call.user.username}@example.com"}
        )

    def _get_project(self, call: _Call) -> Response:
        project = self._project(call.params["project"])
        return JSONResponse(self.project_json(project)) if project else _error(404, "404 Project Not Found")

    def _files_at(self, call: _Call) -> dict[str, FileContent] | Response:
        project = self._project(call.params["project"])
        if project is None:
            return _error(404, "404 Project Not Found")
        ref = call.query.get("ref")
        if not ref:
            return JSONResponse({"error": "ref is missing, ref is empty"}, 400)
        files = project.commits.get(ref)
        return files if files is not None else _error(404, "404 Commit Not Found")

    def _get_raw_file(self, call: _Call) -> Response:
        files = self._files_at(call)
        if isinstance(files, Response):
            return files
        content = files.get(call.params["file"])
        if content is None:
            return _error(404, "404 File Not Found")
        data = content.encode() if isinstance(content, str) else content
        media = "application/octet-stream" if is_binary(content) else "text/plain; charset=utf-8"
        # a header value cannot hold a newline (h11 refuses to send one): such a path goes percent-encoded
        header = call.params["file"] if call.params["file"].isprintable() else quote(call.params["file"], safe="/")
        return Response(data, media_type=media, headers={"X-Gitlab-File-Path": header})

    def _get_file(self, call: _Call) -> Response:
        files = self._files_at(call)
        if isinstance(files, Response):
            return files
        path = call.params["file"]
        content = files.get(path)
        if content is None:
            return _error(404, "404 File Not Found")
        data = content.encode() if isinstance(content, str) else content
        return JSONResponse(
            {
                "file_name": path.rsplit("/", 1)[-1],
                "file_path": path,
                "size": len(data),
                "encoding": "base64",
                "content": base64.b64encode(data).decode(),
                "ref": call.query["ref"],
                "blob_id": _sha("blob", repr(content)),
                "commit_id": call.query["ref"],
                "last_commit_id": call.query["ref"],
            }
        )

    def _compare(self, call: _Call) -> Response:
        """GET /projects/:id/repository/compare?from=&to= (GitLab's shape, trimmed to what we read)."""
        project = self._project(call.params["project"])
        if project is None:
            return _error(404, "404 Project Not Found")
        old, new = project.commits.get(call.query.get("from", "")), project.commits.get(call.query.get("to", ""))
        if old is None or new is None:
            return _error(404, "404 Ref Not Found")
        entries = diff_entries(old, new)
        return JSONResponse(
            {
                "commit": {"id": call.query["to"]},
                "commits": [{"id": call.query["to"]}],
                "diffs": [e.to_json() for e in entries],
                "compare_timeout": False,
                "compare_same_ref": call.query["from"] == call.query["to"],
            }
        )

    def _get_tree(self, call: _Call) -> Response:
        files = self._files_at(call)
        if isinstance(files, Response):
            return files
        recursive = call.query.get("recursive", "false").lower() in ("true", "1")
        prefix = call.query.get("path", "").strip("/")
        entries: dict[str, str] = {}
        for path in files:
            if prefix and not path.startswith(prefix + "/"):
                continue
            parts = path.split("/")
            start = len(prefix.split("/")) if prefix else 0
            for depth in range(start + 1, len(parts)):
                entries["/".join(parts[:depth])] = "tree"
            entries[path] = "blob"
        items = []
        for path, kind in sorted(entries.items()):
            depth = path.count("/") - (prefix.count("/") + 1 if prefix else 0)
            if not recursive and depth > 0:
                continue
            items.append(
                {
                    "id": _sha(kind, path),
                    "name": path.rsplit("/", 1)[-1],
                    "type": kind,
                    "path": path,
                    "mode": "040000" if kind == "tree" else "100644",
                }
            )
        return self._paginate(call, items)

    def _get_mr(self, call: _Call) -> Response:
        mr = self._mr(call)
        return mr if isinstance(mr, Response) else JSONResponse(self.merge_request_json(mr))

    def _list_versions(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        return self._paginate(call, [self.version_json(mr, v) for v in mr.versions])

    def _get_version(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        version = next((v for v in mr.versions if v.id == int(call.params["version"])), None)
        if version is None:
            return _error(404, "404 Not found")
        return JSONResponse(self.version_json(mr, version, with_diffs=True))

    def _list_diffs(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        return self._paginate(call, [e.to_json() for e in self._listed(mr.latest)])

    def _list_discussions(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        return self._paginate(call, [self.discussion_json(mr, d) for d in mr.discussions])

    def _get_discussion(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        discussion = self._discussion(mr, call.params["discussion"])
        if discussion is None:
            return _error(404, "404 Not found")
        return JSONResponse(self.discussion_json(mr, discussion))

    def _validate_position(self, mr: MergeRequest, raw: Any) -> dict[str, Any] | str:
        """GitLab's checks on a text position; the normalised position or the error message."""
        if not isinstance(raw, dict):
            return "400 Bad request - position is invalid"
        if raw.get("position_type", "text") != "text":
            return "400 Bad request - position_type does not have a valid value"
        for key in ("base_sha", "start_sha", "head_sha"):
            if not raw.get(key):
                return f"400 Bad request - position[{key}] is missing"
        latest = mr.latest
        if (raw["base_sha"], raw["start_sha"], raw["head_sha"]) != (
            latest.base_sha,
            latest.start_sha,
            latest.head_sha,
        ):
            return LINE_CODE_ERROR
        new_path = raw.get("new_path") or raw.get("old_path")
        old_path = raw.get("old_path") or new_path
        entry = next((e for e in latest.entries if e.new_path == new_path), None)
        if entry is None or entry.old_path != old_path:
            return LINE_CODE_ERROR
        try:
            new_line = int(raw["new_line"]) if raw.get("new_line") not in (None, "") else None
            old_line = int(raw["old_line"]) if raw.get("old_line") not in (None, "") else None
        except (TypeError, ValueError):
            return "400 Bad request - position[new_line] is invalid"
        shown = entry.hunks.new_lines.get(new_line) if new_line is not None else None
        if new_line is not None and old_line is None:
            ok = shown is not None and shown[0] == "add"
        elif new_line is not None and old_line is not None:
            ok = shown is not None and shown == ("context", old_line)
        elif old_line is not None:
            ok = old_line in entry.hunks.removed_old_lines
        else:
            ok = False
        if not ok:
            return LINE_CODE_ERROR
        return {
            "base_sha": latest.base_sha,
            "start_sha": latest.start_sha,
            "head_sha": latest.head_sha,
            "old_path": old_path,
            "new_path": new_path,
            "position_type": "text",
            "old_line": old_line,
            "new_line": new_line,
            "line_range": None,
        }

    def _new_note(self, discussion_id: str, body: str, user: User, kind: str | None, **extra: Any) -> Note:
        now = _now()
        return Note(next(self._ids), discussion_id, body, user, kind, now, now, **extra)

    def _create_discussion(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        body = call.body.get("body")
        if not body:
            return _error(400, "400 Bad request - body is missing")
        discussion_id = _sha("discussion", str(next(self._ids)))
        if call.body.get("position") is not None:
            position = self._validate_position(mr, call.body["position"])
            if isinstance(position, str):
                return _error(400, position)
            note = self._new_note(discussion_id, body, call.user, "DiffNote", resolvable=True, position=position)
        else:
            note = self._new_note(discussion_id, body, call.user, "DiscussionNote", resolvable=True)
        discussion = Discussion(discussion_id, False, [note])
        mr.discussions.append(discussion)
        return JSONResponse(self.discussion_json(mr, discussion), 201)

    def _add_reply(self, discussion: Discussion, body: str, user: User) -> Note:
        first = discussion.notes[0]
        note = self._new_note(
            discussion.id, body, user, first.type, resolvable=first.resolvable, position=first.position
        )
        note.resolved = first.resolved
        discussion.notes.append(note)
        return note

    def _reply_discussion(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        discussion = self._discussion(mr, call.params["discussion"])
        if discussion is None:
            return _error(404, "404 Not found")
        if not call.body.get("body"):
            return _error(400, "400 Bad request - body is missing")
        return JSONResponse(self.note_json(mr, self._add_reply(discussion, call.body["body"], call.user)), 201)

    def _set_resolved(self, discussion: Discussion, resolved: bool, user: User) -> None:
        for note in discussion.notes:
            if note.resolvable:
                note.resolved = resolved
                note.resolved_by = user if resolved else None
                note.resolved_at = _now() if resolved else None

    def _resolve_discussion(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        discussion = self._discussion(mr, call.params["discussion"])
        if discussion is None:
            return _error(404, "404 Not found")
        value = call.query.get("resolved", call.body.get("resolved"))
        if value is None:
            return _error(400, "400 Bad request - resolved is missing")
        if not discussion.notes[0].resolvable:
            return _error(403, "403 Forbidden")
        self._set_resolved(discussion, str(value).lower() in ("true", "1"), call.user)
        return JSONResponse(self.discussion_json(mr, discussion))

    def _list_notes(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        notes = sorted((n for d in mr.discussions for n in d.notes), key=lambda n: n.id)
        if call.query.get("sort", "desc") == "desc":
            notes.reverse()
        return self._paginate(call, [self.note_json(mr, n) for n in notes])

    def _create_note(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        body = call.body.get("body")
        if not body:
            return _error(400, "400 Bad request - body is missing")
        discussion_id = _sha("discussion", str(next(self._ids)))
        note = self._new_note(discussion_id, body, call.user, None)
        mr.discussions.append(Discussion(discussion_id, True, [note]))
        return JSONResponse(self.note_json(mr, note), 201)

    def _get_note(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        note = self._note(mr, int(call.params["note"]))
        return JSONResponse(self.note_json(mr, note)) if note else _error(404, "404 Note Not Found")

    def _edit_note(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        note = self._note(mr, int(call.params["note"]))
        if note is None:
            return _error(404, "404 Note Not Found")
        if note.author.id != call.user.id:
            return _error(403, "403 Forbidden")
        if "body" in call.body:
            note.body = str(call.body["body"])
            note.updated_at = _now()
        return JSONResponse(self.note_json(mr, note))

    def _add_award(self, note: Note, name: str, user: User) -> dict[str, Any]:
        now = _now()
        award = {
            "id": next(self._ids),
            "name": name,
            "user": self.user_json(user),
            "created_at": now,
            "updated_at": now,
            "awardable_id": note.id,
            "awardable_type": "Note",
        }
        note.awards.append(award)
        return award

    def _list_awards(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        note = self._note(mr, int(call.params["note"]))
        return self._paginate(call, list(note.awards)) if note else _error(404, "404 Note Not Found")

    def _create_award(self, call: _Call) -> Response:
        mr = self._mr(call)
        if isinstance(mr, Response):
            return mr
        note = self._note(mr, int(call.params["note"]))
        if note is None:
            return _error(404, "404 Note Not Found")
        name = call.body.get("name")
        if not name:
            return _error(400, "400 Bad request - name is missing")
        return JSONResponse(self._add_award(note, str(name), call.user), 201)


def quote_path(path: str) -> str:
    """A project or file path as GitLab wants it inside a URL path."""
    return quote(path, safe="")


def new_uuid() -> str:
    return str(uuid.uuid4())


__all__ = [
    "BOT_TOKEN",
    "BOT_USER_ID",
    "HUMAN_USER_ID",
    "LINE_CODE_ERROR",
    "Discussion",
    "FakeGitLab",
    "MergeRequest",
    "Note",
    "Project",
    "RecordedRequest",
    "User",
    "Version",
    "new_uuid",
    "quote_path",
]
