"""GitLabPlatform over real HTTP: the real python-gitlab client against the fake GitLab on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from fakes.gitlab_server import BOT_TOKEN, BOT_USER_ID, FakeGitLab

from agent.gitlab.client import OVERFLOW_PATH, GitLabPlatform
from agent.gitlab.models import DiffPosition, DiffVersions
from reviewers.kernel.errors import InputError, PlatformError, PlatformUnavailableError, PositionRejectedError

PID = 42
IID = 7
BASE = {
    "app/main.py": "import os\n\n\ndef main():\n    print('hi')\n    return 0\n",
    "app/util.py": "def helper(x):\n    return x * 2\n",
    "docs/old_name.md": "# Title\n\nSome words here.\nMore words.\n",
    "legacy.txt": "remove me\n",
    "other/far.py": "SECRET = 'x'\n",
}
HEAD = {
    "app/main.py": "import os\n\n\ndef main():\n    print('hello')\n    os.system(input())\n    return 0\n",
    "app/util.py": "def helper(x):\n    return x * 2\n",
    "app/new.py": "def fresh():\n    return 1\n",
    "docs/new_name.md": "# Title\n\nSome words here.\nMore words!\n",
    "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00",
    "other/far.py": "SECRET = 'x'\n",
}


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab(max_per_page=2) as server:
        server.add_project(PID, "team/app")
        yield server


@pytest.fixture
def platform(fake: FakeGitLab) -> GitLabPlatform:
    return GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=2)


def seed(fake: FakeGitLab, **kwargs: object) -> None:
    fake.add_merge_request(
        PID,
        IID,
        files_base=BASE,
        files_head=HEAD,
        title="Run a command",
        description="Adds a feature.",
        **kwargs,  # type: ignore[arg-type]
    )


def test_merge_request_metadata(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake, draft=True)
    info = platform.merge_request("team/app", IID)
    assert info.project_id == PID and info.iid == IID
    assert info.title == "Draft: Run a command" and info.draft
    assert info.description == "Adds a feature." and info.state == "opened"
    assert info.author_username == "alice" and info.source_branch == "feature" and info.target_branch == "main"
    assert info.web_url.endswith("/team/app/-/merge_requests/7")
    assert info.sha == fake.merge_request(PID, IID).latest.head_sha


def test_latest_version_comes_from_versions_even_without_diff_refs(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake, diff_refs_ready=False)
    version = fake.merge_request(PID, IID).latest
    assert platform.latest_version(PID, IID) == DiffVersions(version.base_sha, version.start_sha, version.head_sha)
    new_head = fake.push(PID, IID, {**HEAD, "app/new.py": "def fresh():\n    return 2\n"})
    assert platform.latest_version(PID, IID).head_sha == new_head


def test_diffs_follow_pagination_and_parse_every_file(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    files, not_reviewed, _ = platform.diffs(PID, IID)
    diff_pages = [r for r in fake.requests if r.path.endswith("/diffs")]
    assert len(diff_pages) == 3  # 6 files, at most 2 per page
    by_path = {f.path: f for f in files}
    assert sorted(by_path) == ["app/main.py", "app/new.py", "docs/new_name.md", "legacy.txt", "logo.png"]
    assert not_reviewed == []
    main = by_path["app/main.py"]
    assert main.status == "modified"
    assert main.added_lines() == {5: "    print('hello')", 6: "    os.system(input())"}
    assert by_path["app/new.py"].status == "added" and by_path["app/new.py"].added_lines()[2] == "    return 1"
    assert by_path["legacy.txt"].status == "deleted" and by_path["legacy.txt"].deletions == 1
    renamed = by_path["docs/new_name.md"]
    assert renamed.status == "renamed" and renamed.old_path == "docs/old_name.md"
    assert by_path["logo.png"].is_binary


def test_too_large_file_is_fetched_and_diffed(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake, too_large={"app/main.py"}, collapsed={"app/new.py"}, silently_empty={"docs/new_name.md"})
    files, not_reviewed, _ = platform.diffs(PID, IID)
    by_path = {f.path: f for f in files}
    assert not_reviewed == []
    assert by_path["app/main.py"].added_lines() == {5: "    print('hello')", 6: "    os.system(input())"}
    assert not by_path["app/main.py"].collapsed
    assert by_path["app/new.py"].added_lines() == {1: "def fresh():", 2: "    return 1"}
    assert by_path["docs/new_name.md"].added_lines() == {4: "More words!"}
    raw_reads = [r for r in fake.requests if r.path.endswith("/raw")]
    # main.py at base and head, new.py at head only, the renamed file at base (old path) and head
    assert len(raw_reads) == 5


def test_file_that_cannot_be_diffed_is_named_not_dropped(fake: FakeGitLab) -> None:
    seed(fake, too_large={"app/main.py"}, generated={"app/util.py"})
    platform = GitLabPlatform(fake.url, BOT_TOKEN, max_retries=1, max_file_bytes=20)
    files, not_reviewed, _ = platform.diffs(PID, IID)
    main = next(f for f in files if f.path == "app/main.py")
    assert main.collapsed and not main.hunks
    reasons = {n.path: (n.reason, n.detail) for n in not_reviewed}
    assert set(reasons) == {"app/main.py"}
    reason, detail = reasons["app/main.py"]
    assert reason == "size" and "too_large" in detail and "20 bytes" in detail


def test_files_beyond_gitlabs_diff_limits_are_named(fake: FakeGitLab) -> None:
    fake.max_diff_files = 3
    seed(fake)
    platform = GitLabPlatform(fake.url, BOT_TOKEN, max_retries=1)
    diff = platform.diffs(PID, IID)
    assert len(diff.files) == 3
    assert [(n.path, n.reason, n.detail) for n in diff.not_reviewed] == [
        (OVERFLOW_PATH, "unavailable", "GitLab's diff limits listed only 3 of 3+ changed files")
    ]


def test_diffs_carry_their_versions_and_refuse_a_stale_head(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    stale = platform.latest_version(PID, IID)
    assert platform.diffs(PID, IID, versions=stale).versions == stale
    new_head = fake.push(PID, IID, {**HEAD, "app/extra.py": "x = 1\n"})
    with pytest.raises(PlatformUnavailableError, match="moved on"):
        platform.diffs(PID, IID, versions=stale)
    assert platform.diffs(PID, IID).versions.head_sha == new_head


def test_generated_files_are_named(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    head = {**HEAD, "app/schema_pb2.py": "X = 1\n"}
    fake.add_merge_request(PID, IID, files_base=BASE, files_head=head, generated={"app/schema_pb2.py"})
    files, not_reviewed, _ = platform.diffs(PID, IID)
    assert [(n.path, n.reason, n.detail) for n in not_reviewed] == [
        ("app/schema_pb2.py", "generated", "generated file")
    ]
    assert next(f for f in files if f.path == "app/schema_pb2.py").collapsed


def test_workspace_reads_lists_and_searches_near_the_change(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    head = platform.latest_version(PID, IID).head_sha
    ws = platform.workspace(PID, head, changed_paths=["app/main.py"])
    assert ws.read_file("app/main.py") == HEAD["app/main.py"]
    assert ws.read_file("logo.png") is None  # binary
    assert ws.read_file("legacy.txt") is None  # not at head
    reads = len(fake.requests)
    assert ws.read_file("app/main.py") == HEAD["app/main.py"]
    assert len(fake.requests) == reads  # cached
    assert ws.list_paths() == sorted(p for p in HEAD)
    hits = ws.search(r"return|SECRET")
    assert {(h.path, h.line) for h in hits} == {("app/main.py", 7), ("app/util.py", 2), ("app/new.py", 2)}
    assert ws.search("return", max_hits=1)[0].path == "app/main.py"  # changed files first
    with pytest.raises(InputError):
        ws.search("(unclosed")


def _position(fake: FakeGitLab, path: str, *, new_line: int | None, old_line: int | None) -> DiffPosition:
    v = fake.merge_request(PID, IID).latest
    return DiffPosition(v.base_sha, v.start_sha, v.head_sha, path, path, new_line=new_line, old_line=old_line)


def test_positioned_discussions_land_on_added_and_context_lines(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    added = platform.post_positioned_discussion(
        PID, IID, body="shell injection", position=_position(fake, "app/main.py", new_line=6, old_line=None)
    )
    context = platform.post_positioned_discussion(
        PID, IID, body="context", position=_position(fake, "app/main.py", new_line=4, old_line=4)
    )
    notes = {n.id: n for n in fake.notes(PID, IID)}
    assert notes[added.note_id].type == "DiffNote"
    assert notes[added.note_id].position == {**notes[added.note_id].position, "new_line": 6, "old_line": None}
    assert notes[context.note_id].position is not None and notes[context.note_id].position["old_line"] == 4
    discussions = platform.discussions(PID, IID)
    assert [d.id for d in discussions] == [added.discussion_id, context.discussion_id]
    assert discussions[0].first_note.author_id == BOT_USER_ID and discussions[0].first_note.body == "shell injection"
    assert not discussions[0].resolved


@pytest.mark.parametrize(
    ("new_line", "old_line"),
    [(2, None), (4, None), (6, 6), (40, None)],  # unchanged line as added; context without old; outside
)
def test_bad_position_is_rejected(
    fake: FakeGitLab, platform: GitLabPlatform, new_line: int, old_line: int | None
) -> None:
    seed(fake)
    with pytest.raises(PositionRejectedError) as err:
        platform.post_positioned_discussion(
            PID, IID, body="x", position=_position(fake, "app/main.py", new_line=new_line, old_line=old_line)
        )
    assert f"app/main.py:{new_line}" in str(err.value) and "!7" in str(err.value)
    assert fake.discussions(PID, IID) == []


def test_position_at_an_old_version_is_rejected(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    stale = _position(fake, "app/main.py", new_line=6, old_line=None)
    fake.push(PID, IID, {**HEAD, "app/extra.py": "x = 1\n"})
    with pytest.raises(PositionRejectedError):
        platform.post_positioned_discussion(PID, IID, body="x", position=stale)


def test_notes_replies_edits_resolves_and_awards(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    note_id = platform.post_note(PID, IID, body="summary v1")
    platform.edit_note(PID, IID, note_id, body="summary v2")
    assert fake.find_note(PID, IID, note_id).body == "summary v2"
    thread = platform.post_discussion(PID, IID, body="general finding")
    reply_id = platform.reply(PID, IID, thread.discussion_id, body="outdated")
    platform.resolve_discussion(PID, IID, thread.discussion_id)
    discussions = {d.id: d for d in platform.discussions(PID, IID)}
    assert discussions[thread.discussion_id].resolved
    assert [n.id for n in discussions[thread.discussion_id].notes] == [thread.note_id, reply_id]
    summary = next(d for d in discussions.values() if d.individual_note)
    assert summary.first_note.id == note_id and not summary.first_note.resolvable
    fake.award(PID, IID, thread.note_id, "thumbsdown")
    awards = platform.award_emoji(PID, IID, thread.note_id)
    assert [(a.name, a.user_id) for a in awards] == [("thumbsdown", fake.human.id)]
    assert platform.bot_user_id() == BOT_USER_ID


def test_rate_limit_then_success(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    fake.fail_next(r"/merge_requests/7$", 429, count=1, retry_after=0)
    fake.fail_next(r"/notes$", 429, count=1, retry_after=0, method="POST")
    assert platform.merge_request(PID, IID).iid == IID
    platform.post_note(PID, IID, body="once")
    statuses = [(r.method, r.status) for r in fake.requests if r.path.endswith(("/merge_requests/7", "/notes"))]
    assert statuses == [("GET", 429), ("GET", 200), ("POST", 429), ("POST", 201)]
    assert len(fake.notes(PID, IID)) == 1


def test_server_errors_past_the_retries_are_retryable(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    fake.fail_next(r"/diffs", 500, count=None)
    with pytest.raises(PlatformUnavailableError) as err:
        platform.diffs(PID, IID)
    assert err.value.retryable
    assert "project 42" in str(err.value) and "!7" in str(err.value)
    assert len([r for r in fake.requests if r.path.endswith("/diffs")]) == 3  # first try + 2 retries


def test_a_failed_post_is_not_retried_so_it_cannot_post_twice(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    seed(fake)
    fake.fail_next(r"/discussions$", 502, count=1, method="POST")
    with pytest.raises(PlatformUnavailableError):
        platform.post_discussion(PID, IID, body="x")
    assert len([r for r in fake.requests if r.method == "POST"]) == 1


def test_wrong_token_is_a_plain_platform_error(fake: FakeGitLab) -> None:
    seed(fake)
    platform = GitLabPlatform(fake.url, "not-the-token", max_retries=1)
    with pytest.raises(PlatformError) as err:
        platform.merge_request(PID, IID)
    assert not isinstance(err.value, PlatformUnavailableError) and not err.value.retryable
    assert "401" in str(err.value) and "not-the-token" not in str(err.value)


def test_unknown_project_is_a_plain_platform_error(platform: GitLabPlatform) -> None:
    with pytest.raises(PlatformError) as err:
        platform.merge_request("nobody/nothing", 1)
    assert not err.value.retryable and "404" in str(err.value)


def test_unreachable_host_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    platform = GitLabPlatform(f"http://127.0.0.1:{port}", BOT_TOKEN, timeout=2, max_retries=1)
    with pytest.raises(PlatformUnavailableError) as err:
        platform.merge_request(PID, IID)
    assert err.value.retryable and "could not be reached" in str(err.value)
