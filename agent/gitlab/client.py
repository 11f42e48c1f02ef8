"""The GitLab platform port: everything reviewloop asks of GitLab, over python-gitlab.

python-gitlab is synchronous; async callers run these methods in a worker thread. The client is
built with `retry_transient_errors=True`, so GETs and PUTs are retried on 429/5xx (honouring
`Retry-After`) up to `max_retries` times. POSTs that create something are retried on 429 only (the
request was refused, not processed): a 5xx after GitLab may already have created the note would
otherwise post it twice; the failure goes up as retryable and the re-run finds the note by its
marker instead.

GitLab facts this module follows: positions come from the newest MR *version*, not
`diff_refs` (empty right after creation); diffs come from the paginated `/diffs` endpoint and a file
GitLab sends no text for (`too_large`, `collapsed`, or an empty diff, which GitLab also sends
unflagged for some large new files, gitlab-org/gitlab#414389) is fetched at both commits and diffed
here, or named in `not_reviewed` with a reason. A pure rename costs two reads that way; a silently
unreviewed file would cost more.

Errors: 401/403/404 and other 4xx → `PlatformError` (not retryable); 429/5xx past the retries and
connection failures → `PlatformUnavailableError` (retryable); a 400 on a positioned discussion →
`PositionRejectedError`. Each carries the project, merge request and head commit.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import gitlab
import requests
from gitlab.exceptions import GitlabError

from agent.context import NotReviewed
from agent.diff import parse_file_patch
from agent.gitlab.models import (
    AwardEmoji,
    DiffPosition,
    DiffVersions,
    Discussion,
    MergeRequestDiff,
    MergeRequestInfo,
    PostedNote,
    ProjectRef,
    discussion_from_api,
)
from agent.gitlab.workspace import GitLabWorkspace
from agent.workspaces.text_cache import DEFAULT_WORKSPACE_CACHE_BYTES
from reviewers.kernel.contracts import CoverageReason, FileChange
from reviewers.kernel.errors import (
    ConfigError,
    DiffParseError,
    PlatformError,
    PlatformUnavailableError,
    PositionRejectedError,
)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RETRIES = 6  # python-gitlab backs off 0.1·2^n s: ~6 s in all, or Retry-After when sent
# The longest wait one `Retry-After` (or `RateLimit-Reset`) may impose. python-gitlab sleeps whatever
# it is told in the review's thread; past this, the server is better left to the job queue's own
# backoff (the failure is retryable) than slept on: 6 retries × 60 s stays well inside a review's
# 900 s deadline.
MAX_RETRY_AFTER_S = 60
PER_PAGE = 100  # GitLab's maximum page size
MAX_FILE_BYTES = 1_000_000  # larger files are neither read by reviewers nor diffed here
MAX_FALLBACK_FETCHES = 100  # files GitLab sent no diff for that we fetch and diff ourselves, per MR
MAX_DIFF_LINES_PER_FILE = 5000
MAX_TREE_ENTRIES = 50_000
BINARY_SNIFF_BYTES = 8000  # git's own heuristic: a NUL in the first 8000 bytes means binary
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
POSITION_STATUS = frozenset({400, 422})
OVERFLOW_PATH = "(files beyond GitLab's diff limits)"  # the not_reviewed entry for an overflowing MR


def _lines(text: str) -> list[str]:
    """Lines with their "\\n", split on "\\n" only, as git splits them (not on \\f or U+2028)."""
    parts = [p + "\n" for p in text.split("\n")]
    parts[-1] = parts[-1][:-1]
    return parts if parts[-1] else parts[:-1]


def hunk_text(old: str, new: str, *, context: int = 3) -> str:
    """The hunks between two texts in GitLab's per-file `diff` format (no file header)."""
    out: list[str] = []
    for line in list(difflib.unified_diff(_lines(old), _lines(new), n=context))[2:]:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def decode_text(data: bytes) -> str | None:
    """UTF-8 text, or None for binary content (a NUL near the start, or not UTF-8)."""
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def retry_after_seconds(value: str, *, now: float) -> int | None:
    """`Retry-After` as whole seconds, capped at `MAX_RETRY_AFTER_S`: RFC 9110 allows a number of
    seconds or an HTTP date; None when it is neither."""
    text = value.strip()
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - now
    return int(min(max(seconds, 0.0), MAX_RETRY_AFTER_S))


def bound_retry_after(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
    """A `requests` response hook: rewrite a refusal's `Retry-After` (or `RateLimit-Reset`) as capped
    whole seconds before python-gitlab reads it. python-gitlab 8.6 calls `int()` on Retry-After, so
    an HTTP date failed the review for good, and it slept any number it was given (issue 40)."""
    del args, kwargs
    headers = response.headers
    now = time.time()
    if "Retry-After" in headers:
        seconds = retry_after_seconds(headers["Retry-After"], now=now)
        if seconds is None:
            del headers["Retry-After"]  # unreadable: python-gitlab's own backoff applies
        else:
            headers["Retry-After"] = str(seconds)
    elif "RateLimit-Reset" in headers and headers["RateLimit-Reset"].strip().isdigit():
        headers["Retry-After"] = str(int(min(max(float(headers["RateLimit-Reset"]) - now, 0.0), MAX_RETRY_AFTER_S)))
    return response


def _project_path(project: ProjectRef) -> str:
    return "/projects/" + quote(str(project), safe="")


class GitLabPlatform:
    """One GitLab instance, seen with one token (the bot's)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        per_page: int = PER_PAGE,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_diff_lines_per_file: int = MAX_DIFF_LINES_PER_FILE,
        max_fallback_fetches: int = MAX_FALLBACK_FETCHES,
        review_generated: bool = False,
        workspace_cache_bytes: int = DEFAULT_WORKSPACE_CACHE_BYTES,
    ) -> None:
        if not url or not token:
            raise ConfigError("GitLab needs a URL and a token (REVIEWLOOP_GITLAB_URL, REVIEWLOOP_GITLAB_TOKEN)")
        self.url = url.rstrip("/")
        # keep_base_url: a `Link: next` header naming another host (a proxy, a hostile redirect) must not
        # receive the bot token; python-gitlab only warns about it otherwise (issue 11)
        self._gl = gitlab.Gitlab(
            self.url, private_token=token, retry_transient_errors=True, timeout=timeout, keep_base_url=True
        )
        self._gl.session.hooks["response"].append(bound_retry_after)
        self._max_retries = max_retries
        self._per_page = per_page
        self.max_file_bytes = max_file_bytes
        self.workspace_cache_bytes = workspace_cache_bytes
        self._max_diff_lines = max_diff_lines_per_file
        self._max_fallback_fetches = max_fallback_fetches
        self._review_generated = review_generated
        self._bot_user_id: int | None = None

    # --- plumbing ----------------------------------------------------------------------------------

    @contextmanager
    def _errors(
        self, doing: str, *, project: ProjectRef | None, mr_iid: int | None = None, head_sha: str | None = None
    ) -> Iterator[None]:
        where: dict[str, Any] = {"project": project, "mr_iid": mr_iid, "head_sha": head_sha}
        try:
            yield
        except GitlabError as exc:
            code = exc.response_code
            message = f"GitLab answered {code} while {doing}: {exc.error_message}".rstrip(": ")
            if code in (401, 403):
                raise PlatformError(f"GitLab refused the token ({code}) while {doing}", **where) from exc
            if code is None or code in RETRYABLE_STATUS or code >= 500:
                raise PlatformUnavailableError(message, **where) from exc
            raise PlatformError(message, **where) from exc
        except requests.RequestException as exc:
            raise PlatformUnavailableError(
                f"GitLab could not be reached while {doing}: {type(exc).__name__}", **where
            ) from exc

    def _get(self, path: str, **query: Any) -> Any:
        return self._gl.http_get(path, query_data=query, max_retries=self._max_retries)

    def _list(self, path: str, *, limit: int | None = None, **query: Any) -> list[dict[str, Any]]:
        pages = self._gl.http_list(
            path, query_data=query, iterator=True, per_page=self._per_page, max_retries=self._max_retries
        )
        out: list[dict[str, Any]] = []
        for item in pages:
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
        return out

    def _post(self, path: str, data: dict[str, Any]) -> Any:
        # Not retried on 5xx: see the module docstring (429 is still retried).
        return self._gl.http_post(path, post_data=data, max_retries=self._max_retries, retry_transient_errors=False)

    def _put(self, path: str, *, data: dict[str, Any] | None = None, query: dict[str, Any] | None = None) -> Any:
        return self._gl.http_put(path, query_data=query, post_data=data, max_retries=self._max_retries)

    @staticmethod
    def _mr_path(project: ProjectRef, iid: int) -> str:
        return f"{_project_path(project)}/merge_requests/{int(iid)}"

    # --- reading -----------------------------------------------------------------------------------

    def bot_user_id(self) -> int:
        """The id of the user our token belongs to (whose notes are ours)."""
        if self._bot_user_id is None:
            with self._errors("reading the current user", project=None):
                self._bot_user_id = int(self._get("/user")["id"])
        return self._bot_user_id

    def project_id(self, project: ProjectRef) -> int:
        with self._errors("reading the project", project=project):
            return int(self._get(_project_path(project))["id"])

    def merge_request(self, project: ProjectRef, iid: int) -> MergeRequestInfo:
        with self._errors("reading the merge request", project=project, mr_iid=iid):
            mr = self._get(self._mr_path(project, iid))
        author = mr.get("author") or {}
        return MergeRequestInfo(
            project_id=int(mr["project_id"]),
            iid=int(mr["iid"]),
            title=str(mr.get("title") or ""),
            description=str(mr.get("description") or ""),
            draft=bool(mr.get("draft", mr.get("work_in_progress", False))),
            state=str(mr.get("state") or ""),
            author_id=int(author.get("id", 0)),
            author_username=str(author.get("username", "")),
            web_url=str(mr.get("web_url") or ""),
            source_branch=str(mr.get("source_branch") or ""),
            target_branch=str(mr.get("target_branch") or ""),
            sha=mr.get("sha"),
        )

    def _newest_version(self, project: ProjectRef, iid: int) -> dict[str, Any]:
        with self._errors("reading the merge request versions", project=project, mr_iid=iid):
            versions = self._gl.http_list(
                f"{self._mr_path(project, iid)}/versions",
                get_all=False,
                per_page=self._per_page,
                max_retries=self._max_retries,
            )
        if not isinstance(versions, list) or not versions:
            raise PlatformUnavailableError(
                "GitLab has not computed a diff version for this merge request yet", project=project, mr_iid=iid
            )
        return max(versions, key=lambda v: int(v["id"]))

    @staticmethod
    def _shas(version: dict[str, Any]) -> DiffVersions:
        return DiffVersions(
            str(version["base_commit_sha"]), str(version["start_commit_sha"]), str(version["head_commit_sha"])
        )

    def latest_version(self, project: ProjectRef, iid: int) -> DiffVersions:
        """base/start/head SHAs of the newest MR version. Retryable error while GitLab has none yet."""
        return self._shas(self._newest_version(project, iid))

    def raw_file(self, project: ProjectRef, path: str, ref: str) -> bytes | None:
        """A file's bytes at a commit; None when it does not exist there (404)."""
        url = f"{_project_path(project)}/repository/files/{quote(path, safe='')}/raw"
        try:
            with self._errors(f"reading {path}", project=project, head_sha=ref):
                response = self._gl.http_get(url, query_data={"ref": ref}, raw=True, max_retries=self._max_retries)
        except PlatformError as exc:
            if isinstance(exc.__cause__, GitlabError) and exc.__cause__.response_code == 404:
                return None
            raise
        if not isinstance(response, requests.Response):  # raw=True always gives one; the type says otherwise
            raise PlatformError(f"GitLab sent no raw content for {path}", project=project, head_sha=ref)
        return response.content

    def read_file(self, project: ProjectRef, path: str, ref: str) -> str | None:
        """A file's text at a commit; None when absent, binary or larger than `max_file_bytes`."""
        return self.read_text(project, path, ref)[0]

    def read_text(
        self, project: ProjectRef, path: str, ref: str
    ) -> tuple[str | None, tuple[CoverageReason, str] | None]:
        """A file's text at a commit (bytes that are not UTF-8 replaced, as a local git workspace reads
        them), or None with why not when the file exists: binary, or over `max_file_bytes`."""
        data = self.raw_file(project, path, ref)
        if data is None:
            return None, None
        if len(data) > self.max_file_bytes:
            return None, ("size", f"{len(data)} bytes, over the {self.max_file_bytes}-byte limit for reading a file")
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            return None, ("binary", "binary content (a NUL byte near the start)")
        return data.decode("utf-8", errors="replace"), None

    def list_paths(self, project: ProjectRef, ref: str) -> list[str]:
        """Every file path at a commit (the repository tree, paginated), capped at MAX_TREE_ENTRIES."""
        with self._errors("listing the repository tree", project=project, head_sha=ref):
            entries = self._list(
                f"{_project_path(project)}/repository/tree", limit=MAX_TREE_ENTRIES, ref=ref, recursive="true"
            )
        return sorted(str(e["path"]) for e in entries if e.get("type") == "blob")

    def changed_paths(self, project: ProjectRef, *, from_sha: str, to_sha: str) -> set[str] | None:
        """Paths the commits between two SHAs touched (old and new names), from the compare API;
        None when GitLab timed out computing it (the caller then reviews the whole MR)."""
        with self._errors("comparing commits", project=project, head_sha=to_sha):
            result = self._get(f"{_project_path(project)}/repository/compare", **{"from": from_sha, "to": to_sha})
        if not isinstance(result, dict) or result.get("compare_timeout"):
            return None
        paths: set[str] = set()
        for d in result.get("diffs", []):
            paths.update(p for p in (d.get("old_path"), d.get("new_path")) if p)
        return paths

    def workspace(self, project: ProjectRef, head_sha: str, *, changed_paths: Sequence[str] = ()) -> GitLabWorkspace:
        return GitLabWorkspace(
            self, project, head_sha, changed_paths=changed_paths, cache_bytes=self.workspace_cache_bytes
        )

    def diffs(self, project: ProjectRef, iid: int, *, versions: DiffVersions | None = None) -> MergeRequestDiff:
        """Every changed file of the newest version, with that version's SHAs. A file GitLab sent no
        diff text for is fetched at base and head and diffed here; what cannot be is a collapsed
        `FileChange` named in `not_reviewed` with the reason, and so are the files beyond GitLab's
        diff limits (an "overflow" version lists only the first ones). Nothing is dropped silently.
        `versions`, when given, must still be the newest (else a retryable error: the MR moved on)."""
        newest = self._newest_version(project, iid)
        current = self._shas(newest)
        if versions is not None and versions.head_sha != current.head_sha:
            raise PlatformUnavailableError(
                f"the merge request moved on to {current.head_sha[:12]} while it was being loaded",
                project=project,
                mr_iid=iid,
                head_sha=versions.head_sha,
            )
        with self._errors("listing the merge request diffs", project=project, mr_iid=iid, head_sha=current.head_sha):
            entries = self._list(f"{self._mr_path(project, iid)}/diffs")
        files: list[FileChange] = []
        not_reviewed: list[NotReviewed] = []
        fetches = 0
        for entry in entries:
            change, reason, fetched = self._file_change(
                project, entry, current, fetch_budget=fetches < self._max_fallback_fetches
            )
            fetches += fetched
            files.append(change)
            if reason:
                not_reviewed.append(NotReviewed.from_words(change.path, reason))
        real_size = str(newest.get("real_size") or "")
        if newest.get("state") == "overflow" or real_size.endswith("+"):
            reason = f"GitLab's diff limits listed only {len(entries)} of {real_size or 'more'} changed files"
            not_reviewed.append(NotReviewed(path=OVERFLOW_PATH, reason="unavailable", detail=reason))
        return MergeRequestDiff(files, not_reviewed, current)

    def _file_change(
        self, project: ProjectRef, entry: dict[str, Any], versions: DiffVersions, *, fetch_budget: bool
    ) -> tuple[FileChange, str | None, int]:
        """One `/diffs` entry as a FileChange, the reason it is not reviewable (or None), and how
        many fallback fetches it used (0 or 1)."""
        meta: dict[str, Any] = {
            "old_path": str(entry.get("old_path") or entry.get("new_path")),
            "new_path": str(entry.get("new_path") or entry.get("old_path")),
            "new_file": bool(entry.get("new_file")),
            "deleted_file": bool(entry.get("deleted_file")),
            "renamed_file": bool(entry.get("renamed_file")),
            "old_mode": entry.get("a_mode"),
            "new_mode": entry.get("b_mode"),
        }
        too_large, collapsed = bool(entry.get("too_large")), bool(entry.get("collapsed"))
        text = str(entry.get("diff") or "")
        if entry.get("generated_file") and not self._review_generated:
            return self._unavailable(meta, "generated file"), "generated file", 0
        why = "too_large" if too_large else "collapsed" if collapsed else "empty diff"
        if text.strip() and not (too_large or collapsed):
            try:
                return parse_file_patch(patch=text, **meta), None, 0
            except DiffParseError:
                why = "a diff that does not parse"  # diff the contents ourselves instead
        if not fetch_budget:
            reason = f"GitLab sent no diff ({why}) and the budget of fetched files is spent"
            return self._unavailable(meta, reason), reason, 0
        return (*self._diff_contents(project, meta, versions, why), 1)

    @staticmethod
    def _unavailable(meta: dict[str, Any], reason: str) -> FileChange:
        change = parse_file_patch(patch="", collapsed=True, **meta)
        return FileChange(
            path=change.path,
            old_path=change.old_path,
            status=change.status,
            old_mode=change.old_mode,
            new_mode=change.new_mode,
            collapsed=True,
            collapsed_reason=reason,
        )

    def _diff_contents(
        self, project: ProjectRef, meta: dict[str, Any], versions: DiffVersions, why: str
    ) -> tuple[FileChange, str | None]:
        old = b"" if meta["new_file"] else self.raw_file(project, meta["old_path"], versions.base_sha)
        new = b"" if meta["deleted_file"] else self.raw_file(project, meta["new_path"], versions.head_sha)
        if old is None or new is None:
            reason = f"GitLab sent no diff ({why}) and the file could not be read at both commits"
            return self._unavailable(meta, reason), reason
        if max(len(old), len(new)) > self.max_file_bytes:
            reason = f"GitLab sent no diff ({why}) and the file is over {self.max_file_bytes} bytes"
            return self._unavailable(meta, reason), reason
        old_text, new_text = decode_text(old), decode_text(new)
        if old_text is None or new_text is None:
            return parse_file_patch(patch="Binary files differ", **meta), None
        patch = hunk_text(old_text, new_text)
        if patch.count("\n") > self._max_diff_lines:
            reason = f"GitLab sent no diff ({why}) and the diff is over {self._max_diff_lines} lines"
            return self._unavailable(meta, reason), reason
        return parse_file_patch(patch=patch, **meta), None

    def discussions(self, project: ProjectRef, iid: int) -> list[Discussion]:
        with self._errors("listing discussions", project=project, mr_iid=iid):
            raw = self._list(f"{self._mr_path(project, iid)}/discussions")
        return [discussion_from_api(d) for d in raw]

    def award_emoji(self, project: ProjectRef, iid: int, note_id: int) -> list[AwardEmoji]:
        with self._errors("listing award emoji", project=project, mr_iid=iid):
            raw = self._list(f"{self._mr_path(project, iid)}/notes/{int(note_id)}/award_emoji")
        return [AwardEmoji(int(a["id"]), str(a["name"]), int((a.get("user") or {}).get("id", 0))) for a in raw]

    # --- writing -----------------------------------------------------------------------------------

    def post_positioned_discussion(
        self, project: ProjectRef, iid: int, *, body: str, position: DiffPosition
    ) -> PostedNote:
        """A diff thread at `position`; `PositionRejectedError` when GitLab refuses the position."""
        head = position.head_sha
        try:
            with self._errors(
                f"posting a discussion on {position.new_path}", project=project, mr_iid=iid, head_sha=head
            ):
                raw = self._post(
                    f"{self._mr_path(project, iid)}/discussions", {"body": body, "position": position.to_api()}
                )
        except PlatformError as exc:
            cause = exc.__cause__
            if isinstance(cause, GitlabError) and cause.response_code in POSITION_STATUS:
                line = position.new_line if position.new_line is not None else position.old_line
                raise PositionRejectedError(
                    f"GitLab rejected the position {position.new_path}:{line}: {cause.error_message}",
                    project=project,
                    mr_iid=iid,
                    head_sha=head,
                ) from cause
            raise
        discussion = discussion_from_api(raw)
        return PostedNote(discussion.id, discussion.first_note.id)

    def post_discussion(self, project: ProjectRef, iid: int, *, body: str) -> PostedNote:
        """A resolvable thread on the merge request without a position (our fallback for findings)."""
        with self._errors("posting a discussion", project=project, mr_iid=iid):
            raw = self._post(f"{self._mr_path(project, iid)}/discussions", {"body": body})
        discussion = discussion_from_api(raw)
        return PostedNote(discussion.id, discussion.first_note.id)

    def reply(self, project: ProjectRef, iid: int, discussion_id: str, *, body: str) -> int:
        """A note in an existing thread; returns its id."""
        with self._errors("replying in a discussion", project=project, mr_iid=iid):
            raw = self._post(
                f"{self._mr_path(project, iid)}/discussions/{quote(discussion_id, safe='')}/notes", {"body": body}
            )
        return int(raw["id"])

    def post_note(self, project: ProjectRef, iid: int, *, body: str) -> int:
        """A plain note on the merge request (not a thread: it cannot block merging); returns its id."""
        with self._errors("posting a note", project=project, mr_iid=iid):
            raw = self._post(f"{self._mr_path(project, iid)}/notes", {"body": body})
        return int(raw["id"])

    def edit_note(self, project: ProjectRef, iid: int, note_id: int, *, body: str) -> None:
        with self._errors("editing a note", project=project, mr_iid=iid):
            self._put(f"{self._mr_path(project, iid)}/notes/{int(note_id)}", data={"body": body})

    def resolve_discussion(self, project: ProjectRef, iid: int, discussion_id: str, *, resolved: bool = True) -> None:
        with self._errors("resolving a discussion", project=project, mr_iid=iid):
            self._put(
                f"{self._mr_path(project, iid)}/discussions/{quote(discussion_id, safe='')}",
                query={"resolved": "true" if resolved else "false"},
            )
