"""publish_review / resolve_outdated over real HTTP: python-gitlab against the fake GitLab on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from markdown_it import MarkdownIt

from agent.context import NotReviewed
from agent.diff import DiffIndex
from agent.gitlab.client import GitLabPlatform
from agent.gitlab.models import DiffVersions
from agent.gitlab.publisher import (
    OUTDATED_MARKER,
    FindingToPublish,
    OpenThread,
    PostedThread,
    PublishResult,
    fingerprint_of,
    publish_review,
    resolve_outdated,
)
from agent.sanitize import SUMMARY_MARKER, ZWJ, hidden_marker, parse_markers
from reviewers.kernel.contracts import Finding

PID = 5
IID = 3
BASE = {
    "svc/api.py": "import os\n\n\ndef handler(req):\n    name = req.args['name']\n    return name\n",
    "svc/util.py": "def clamp(x):\n    return max(0, x)\n",
}
HEAD = {
    "svc/api.py": (
        "import os\n\n\ndef handler(req):\n    name = req.args['name']\n"
        "    os.system('echo ' + name)\n    return name\n"
    ),
    "svc/util.py": "def clamp(x):\n    return max(0, x)\n",
    "svc/new.py": "PASSWORD = 'hunter2'\n",
}


def finding(
    path: str, line: int, evidence: str, *, title: str = "Problem", body: str = "Explained.", **kw: object
) -> Finding:
    values: dict[str, object] = {
        "path": path,
        "line": line,
        "end_line": line,
        "category": "security",
        "severity": "high",
        "title": title,
        "body": body,
        "evidence": evidence,
        "reviewer": "security",
        "rule": "llm",
    }
    values.update(kw)
    f = Finding.model_validate(values)
    return f.model_copy(update={"fingerprint": fingerprint_of(f)})


SHELL = finding("svc/api.py", 6, "    os.system('echo ' + name)", title="Shell injection")
CONTEXT = finding("svc/api.py", 5, "    name = req.args['name']", title="Unvalidated input", severity="medium")
SECRET = finding("svc/new.py", 1, "PASSWORD = 'hunter2'", title="Hard-coded password")
OUTSIDE = finding("svc/util.py", 2, "    return max(0, x)", title="Clamp is wrong", category="code_quality")


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, "team/svc")
        server.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Echo names")
        yield server


@pytest.fixture
def platform(fake: FakeGitLab) -> GitLabPlatform:
    return GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=2)


class Recorder:
    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[tuple[int, str, int, bool]] = []
        self.fail_on_call = fail_on_call

    def __call__(self, finding_id: int, discussion_id: str, note_id: int, fallback: bool) -> None:
        self.calls.append((finding_id, discussion_id, note_id, fallback))
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("worker died")


def publish(
    platform: GitLabPlatform,
    items: list[FindingToPublish],
    record: Recorder,
    *,
    summary: str = "Reviewed 3 files.",
    existing: dict[str, PostedThread] | None = None,
    versions: DiffVersions | None = None,
    index: DiffIndex | None = None,
    allowed_urls: frozenset[str] = frozenset(),
) -> PublishResult:
    versions = versions or platform.latest_version(PID, IID)
    if index is None:
        files = platform.diffs(PID, IID, versions=versions).files
        index = DiffIndex(files)
    return publish_review(
        platform,
        project=PID,
        mr_iid=IID,
        versions=versions,
        diff_index=index,
        findings=items,
        existing=existing or {},
        summary=summary,
        record_posted=record,
        not_reviewed=[NotReviewed(path="logo.png", reason="binary file")],
        allowed_urls=allowed_urls,
    )


def test_findings_land_on_added_and_context_lines(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    record = Recorder()
    result = publish(
        platform, [FindingToPublish(1, SHELL, "REAL", "ok"), FindingToPublish(2, CONTEXT, "REAL", "ok")], record
    )
    assert [p.finding_id for p in result.posted] == [1, 2] and not result.fallbacks
    notes = {n.id: n for n in fake.notes(PID, IID)}
    shell = notes[result.posted[0].note_id]
    assert shell.type == "DiffNote" and shell.position is not None
    assert (shell.position["new_line"], shell.position["old_line"]) == (6, None)
    assert shell.position["old_path"] == shell.position["new_path"] == "svc/api.py"
    context = notes[result.posted[1].note_id]
    assert context.position is not None and (context.position["new_line"], context.position["old_line"]) == (5, 5)
    assert parse_markers(shell.body) == {SHELL.fingerprint}
    assert record.calls == [(p.finding_id, p.discussion_id, p.note_id, False) for p in result.posted]


def test_line_outside_the_diff_falls_back_to_a_quoting_thread(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    record = Recorder()
    result = publish(platform, [FindingToPublish(9, OUTSIDE, "REAL", "ok")], record)
    (posted,) = result.posted
    assert posted.fallback and record.calls == [(9, posted.discussion_id, posted.note_id, True)]
    note = fake.find_note(PID, IID, posted.note_id)
    assert note.position is None and note.resolvable
    assert "`svc/util.py:2`" in note.body and "return max(0, x)" in note.body and "outside the diff" in note.body


def test_rejected_position_falls_back_never_drops(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    versions = platform.latest_version(PID, IID)
    files = platform.diffs(PID, IID, versions=versions).files
    fake.push(PID, IID, {**HEAD, "svc/extra.py": "x = 1\n"})  # a push between loading and posting
    record = Recorder()
    result = publish(
        platform, [FindingToPublish(1, SHELL, "REAL", "ok")], record, versions=versions, index=DiffIndex(files)
    )
    (posted,) = result.posted
    assert posted.fallback
    body = fake.find_note(PID, IID, posted.note_id).body
    assert "`svc/api.py:6`" in body and "did not accept" in body
    assert [r.status for r in fake.requests if r.method == "POST" and r.path.endswith("/discussions")] == [400, 201]


def test_republishing_posts_nothing_new(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    items = [
        FindingToPublish(1, SHELL, "REAL", "ok"),
        FindingToPublish(2, SECRET, "REAL", "ok"),
        FindingToPublish(3, OUTSIDE, "REAL", "ok"),
        FindingToPublish(4, CONTEXT, "NEEDS_HUMAN_REVIEW", "reviewer rarely right here"),
        FindingToPublish(5, CONTEXT, "FALSE_POSITIVE", "not reachable"),
    ]
    first = publish(platform, items, Recorder())
    notes_after_first = [(n.id, n.body) for n in fake.notes(PID, IID)]
    assert len(first.posted) == 3 and first.summary_created and first.needs_human == [4]
    # A re-run with new finding ids (a new review row) and nothing from the store: markers suffice.
    again = Recorder()
    second = publish(platform, [i._replace(finding_id=i.finding_id + 10) for i in items], again)
    assert second.posted == [] and len(second.reused) == 3
    assert not second.summary_created and not second.summary_edited
    assert [(n.id, n.body) for n in fake.notes(PID, IID)] == notes_after_first
    assert sorted(c[0] for c in again.calls) == [11, 12, 13]
    assert {c[1:] for c in again.calls} == {(p.discussion_id, p.note_id, p.fallback) for p in first.posted}
    assert [p.fallback for p in first.posted].count(True) == 1  # OUTSIDE, kept as a fallback on reuse


def test_store_knowledge_alone_prevents_a_repost(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    known = {SHELL.fingerprint: PostedThread("0" * 40, 123)}
    record = Recorder()
    result = publish(platform, [FindingToPublish(1, SHELL, "REAL", "ok")], record, existing=known)
    assert result.posted == [] and record.calls == [(1, "0" * 40, 123, False)]
    assert [d for d in fake.discussions(PID, IID) if not d.individual_note] == []


def test_summary_is_one_note_edited_in_place(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    needs_human = FindingToPublish(4, CONTEXT, "NEEDS_HUMAN_REVIEW", "calibration: often rejected")
    first = publish(platform, [needs_human], Recorder(), summary="Round one.")
    second = publish(platform, [needs_human], Recorder(), summary="Round two.")
    summaries = [n for n in fake.notes(PID, IID) if SUMMARY_MARKER in n.body]
    assert len(summaries) == 1 and summaries[0].id == first.summary_note_id == second.summary_note_id
    assert second.summary_edited and "Round two." in summaries[0].body and "Round one." not in summaries[0].body
    body = summaries[0].body
    assert (
        "`svc/api.py:5`" in body
        and "calibration: often rejected" in body
        and "`logo.png` — binary: binary file" in body
    )
    assert summaries[0].type is None  # a plain note: it cannot block merging as an open thread would


def test_crash_between_post_and_record_resumes_without_reposting(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    items = [FindingToPublish(1, SHELL, "REAL", "ok"), FindingToPublish(2, SECRET, "REAL", "ok")]
    with pytest.raises(RuntimeError, match="worker died"):
        publish(platform, items, Recorder(fail_on_call=2))
    record = Recorder()
    result = publish(platform, items, record)
    assert [p.finding_id for p in result.reused] == [1, 2] and result.posted == []
    threads = [d for d in fake.discussions(PID, IID) if not d.individual_note]
    assert len(threads) == 2


def test_a_marker_pasted_by_someone_else_does_not_suppress_a_finding(
    fake: FakeGitLab, platform: GitLabPlatform
) -> None:
    alice = GitLabPlatform(fake.url, "alice-token", max_retries=1)
    alice.post_discussion(PID, IID, body=f"copied {hidden_marker(SHELL.fingerprint)}")
    bot_thread = platform.post_discussion(PID, IID, body="an unrelated bot thread")
    alice.reply(PID, IID, bot_thread.discussion_id, body=hidden_marker(SHELL.fingerprint))
    result = publish(platform, [FindingToPublish(1, SHELL, "REAL", "ok")], Recorder())
    assert len(result.posted) == 1 and not result.posted[0].fallback


def test_model_text_is_neutralised_in_posted_bodies(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    loud = finding(
        "svc/api.py",
        6,
        "    os.system('echo ' + name)",
        title="@all look",
        body="<img src=x onerror=alert(1)> see https://evil.example\n/approve",
    )
    result = publish(platform, [FindingToPublish(1, loud, "REAL", "ok")], Recorder())
    body = fake.find_note(PID, IID, result.posted[0].note_id).body
    assert f"@{ZWJ}all" in body and "<img" not in body and "evil.example" not in body and "\n/approve" not in body
    assert parse_markers(body) == {loud.fingerprint}


def test_posted_bodies_carry_no_foreign_image_or_link(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    """Issue 21, item 8: the posted note, rendered as CommonMark, has no image or link off the merge
    request's own GitLab, whatever Markdown trick the model used; links into that GitLab stay."""
    own = f"{fake.url}/team/svc/-/merge_requests/{IID}"
    body = (
        "![x](//evil.example/a.png 'quoted title')\n\n![a [b] c](//evil.example/b.png)\n\n![x](\n//evil.example/c.png)"
        "\n\n> [q]: //evil.example/d.png\n\n![q][q]\n\n- [l]: //evil.example/e.png\n\n![l][l]\n\n"
        f"Compare [the earlier fix]({own})."
    )
    loud = finding("svc/api.py", 6, "    os.system('echo ' + name)", title="Images", body=body)
    result = publish(
        platform, [FindingToPublish(1, loud, "REAL", "ok")], Recorder(), allowed_urls=frozenset({fake.url})
    )
    posted = fake.find_note(PID, IID, result.posted[0].note_id).body
    tokens = [
        t for block in MarkdownIt("commonmark", {"html": True}).parse(posted) for t in [block, *(block.children or [])]
    ]
    urls = [str(t.attrs.get("href") or t.attrs.get("src")) for t in tokens if t.type in ("link_open", "image")]
    assert urls == [own], posted
    assert "<img" not in MarkdownIt("commonmark").render(posted)


def test_threads_whose_code_is_gone_are_resolved(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    result = publish(
        platform, [FindingToPublish(1, SHELL, "REAL", "ok"), FindingToPublish(2, SECRET, "REAL", "ok")], Recorder()
    )
    shell, secret = result.posted
    fixed = {**HEAD, "svc/api.py": BASE["svc/api.py"].replace("return name", "return escape(name)")}
    head = fake.push(PID, IID, fixed)
    files = platform.diffs(PID, IID).files
    threads = [
        OpenThread(shell.discussion_id, shell.fingerprint, SHELL.path, SHELL.line, SHELL.evidence, 1),
        OpenThread(secret.discussion_id, secret.fingerprint, SECRET.path, SECRET.line, SECRET.evidence, 2),
    ]
    workspace = platform.workspace(PID, head, changed_paths=[f.path for f in files])
    acted = resolve_outdated(platform, PID, IID, threads, DiffIndex(files), workspace)
    assert [t.finding_id for t in acted] == [1]
    resolved = {d.id: d.notes[0].resolved for d in fake.discussions(PID, IID)}
    assert resolved[shell.discussion_id] and not resolved[secret.discussion_id]
    # Already resolved: nothing more to do.
    assert resolve_outdated(platform, PID, IID, threads, DiffIndex(files), workspace) == []


def test_outdated_threads_can_be_marked_once_instead(fake: FakeGitLab, platform: GitLabPlatform) -> None:
    (shell,) = publish(platform, [FindingToPublish(1, SHELL, "REAL", "ok")], Recorder()).posted
    head = fake.push(PID, IID, {**HEAD, "svc/api.py": BASE["svc/api.py"]})
    files = platform.diffs(PID, IID).files
    thread = OpenThread(shell.discussion_id, shell.fingerprint, SHELL.path, SHELL.line, SHELL.evidence, 1)
    workspace = platform.workspace(PID, head)
    for _ in range(2):
        assert resolve_outdated(platform, PID, IID, [thread], DiffIndex(files), workspace, resolve=False) == [thread]
    (discussion,) = [d for d in fake.discussions(PID, IID) if d.id == shell.discussion_id]
    replies = [n for n in discussion.notes[1:] if OUTDATED_MARKER in n.body]
    assert len(replies) == 1 and "no longer changes this file" in replies[0].body
    assert not discussion.notes[0].resolved
