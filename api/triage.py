"""What a verified, parsed webhook asks of us: a review, a vote, a reply, or nothing (with why).

Pure functions over the hook models, so every trigger rule is tested without a server:
review on open/reopen (not drafts), on update with new commits (`oldrev`), and when a draft
becomes ready; ignore everything else with a reason a person can read in the response and in
`webhook_events.reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent.thread_replies import ReplyIntent, reply_intent
from api.gitlab_hooks import EmojiHook, MergeRequestHook, NoteHook

ReviewTrigger = Literal["opened", "reopened", "new_commits", "ready"]
Vote = Literal[-1, 0, 1]

# GitLab's emoji names for the two votes; "+1"/"-1" are aliases some clients send.
UPVOTE_EMOJI = frozenset({"thumbsup", "+1"})
DOWNVOTE_EMOJI = frozenset({"thumbsdown", "-1"})
# A reply counts as a vote only when it carries exactly one polarity of these; see `reply_vote`.
UPVOTE_MARKS = ("👍", ":+1:", ":thumbsup:")
DOWNVOTE_MARKS = ("👎", ":-1:", ":thumbsdown:")


@dataclass(frozen=True)
class Scope:
    """Which hooks are ours: the allow-list (ids or paths; empty = all) and the bot's identity.

    An id entry is matched against the hook's numeric project id, which its secret vouched for. A
    path entry is matched against the path the hook *claims*: that only filters, it authorises
    nothing. GitLab is asked which id the allowed path has (agent.gitlab.projects) before a review
    reads the project (the worker) and before a vote or a reply counts (api/project_check.py), so a
    hook pairing an allowed path with another project's id reviews nothing and counts nothing.
    """

    projects: frozenset[str] = frozenset()
    bot_user_id: int | None = None
    bot_username: str | None = None

    def allows(self, *, project_id: int, project_path: str) -> bool:
        if not self.projects or str(project_id) in self.projects:
            return True
        # an id entry never matches a claimed path ("42" as a path is not project 42)
        return bool(project_path) and not project_path.isdigit() and project_path in self.projects

    def is_bot(self, *, user_id: int | None, username: str | None = None) -> bool:
        if self.bot_user_id is not None and user_id == self.bot_user_id:
            return True
        return bool(self.bot_username and username and username == self.bot_username)


@dataclass(frozen=True)
class Ignore:
    reason: str


@dataclass(frozen=True)
class ReviewRequest:
    project_id: int
    project_path: str
    mr_iid: int
    head_sha: str
    trigger: ReviewTrigger

    @property
    def lock_key(self) -> str:
        """One pending and one running review per merge request (procrastinate's lock keys)."""
        return f"mr:{self.project_id}:{self.mr_iid}"


@dataclass(frozen=True)
class VoteOnNote:
    """An award (+1/-1) or a revoke (withdraws that polarity) of a thumb on a note."""

    project_id: int
    note_id: int
    discussion_id: str | None
    note_author_id: int | None
    user_id: int
    value: Literal[-1, 1]
    revoked: bool


@dataclass(frozen=True)
class ReplyInDiscussion:
    project_id: int
    discussion_id: str
    note_id: int
    user_id: int
    text: str
    value: Vote
    intent: ReplyIntent = "comment"  # a question is answered in the thread (agent/thread_replies.py)


Decision = Ignore | ReviewRequest | VoteOnNote | ReplyInDiscussion


def triage(hook: MergeRequestHook | NoteHook | EmojiHook, scope: Scope) -> Decision:
    if not scope.allows(project_id=hook.project.id, project_path=hook.project.path_with_namespace):
        return Ignore(
            f"project {hook.project.path_with_namespace or hook.project.id} is not in REVIEWLOOP_GITLAB_PROJECTS"
        )
    if isinstance(hook, MergeRequestHook):
        return triage_merge_request(hook)
    if isinstance(hook, EmojiHook):
        return triage_emoji(hook, scope)
    return triage_note(hook, scope)


def became_ready(hook: MergeRequestHook) -> bool:
    for change in (hook.changes.draft, hook.changes.work_in_progress):
        if change is not None and change.previous is True and change.current is False:
            return True
    return False


def triage_merge_request(hook: MergeRequestHook) -> Decision:
    mr = hook.object_attributes
    if mr.state != "opened":
        return Ignore(f"merge request is {mr.state}")
    if mr.draft or mr.work_in_progress:
        return Ignore("merge request is a draft")
    trigger: ReviewTrigger
    if mr.action == "open":
        trigger = "opened"
    elif mr.action == "reopen":
        trigger = "reopened"
    elif mr.action == "update" and became_ready(hook):
        trigger = "ready"
    elif mr.action == "update" and mr.oldrev:
        trigger = "new_commits"
    elif mr.action == "update":
        return Ignore("update without new commits")
    else:
        return Ignore(f"merge request action {mr.action!r} does not start a review")
    if mr.last_commit is None:
        return Ignore("merge request has no commits yet")
    return ReviewRequest(
        project_id=hook.project.id,
        project_path=hook.project.path_with_namespace,
        mr_iid=mr.iid,
        head_sha=mr.last_commit.id,
        trigger=trigger,
    )


def triage_emoji(hook: EmojiHook, scope: Scope) -> Decision:
    award = hook.object_attributes
    if scope.is_bot(user_id=hook.user.id, username=hook.user.username):
        return Ignore("our own emoji")
    if award.awardable_type != "Note":
        return Ignore(f"emoji on a {award.awardable_type}, not on a note")
    if award.name in UPVOTE_EMOJI:
        value: Literal[-1, 1] = 1
    elif award.name in DOWNVOTE_EMOJI:
        value = -1
    else:
        return Ignore(f"emoji {award.name!r} is not a vote")
    action = hook.event_type or award.action
    if action not in ("award", "revoke"):
        return Ignore(f"emoji action {action!r} is not award or revoke")
    note = hook.note
    return VoteOnNote(
        project_id=hook.project.id,
        note_id=award.awardable_id,
        discussion_id=note.discussion_id if note else None,
        note_author_id=note.author_id if note else None,
        user_id=hook.user.id,
        value=value,
        revoked=action == "revoke",
    )


def reply_vote(text: str) -> Vote:
    """+1/-1 when a reply carries thumbs of one polarity only, else 0 (a comment, not a vote).

    Deliberately simple: sentiment in prose is left to the people reading the comments, except a
    reply that disputes the finding outright (`agent.thread_replies.reply_intent`), which `triage_note`
    counts as -1.
    """
    up = any(mark in text for mark in UPVOTE_MARKS)
    down = any(mark in text for mark in DOWNVOTE_MARKS)
    if up and not down:
        return 1
    if down and not up:
        return -1
    return 0


def triage_note(hook: NoteHook, scope: Scope) -> Decision:
    note = hook.object_attributes
    if note.system:
        return Ignore("system note")
    if scope.is_bot(user_id=note.author_id or hook.user.id, username=hook.user.username):
        return Ignore("our own note")
    if note.noteable_type != "MergeRequest":
        return Ignore(f"note on a {note.noteable_type}, not on a merge request")
    if not note.discussion_id:
        return Ignore("note is not in a discussion")
    intent = reply_intent(note.note)
    value = reply_vote(note.note)
    if intent == "dispute" and value == 0:
        value = -1  # "this is a false positive" is a 👎 in words; explicit thumbs still decide
    return ReplyInDiscussion(
        project_id=hook.project.id,
        discussion_id=note.discussion_id,
        note_id=note.id,
        user_id=note.author_id or hook.user.id,
        text=note.note,
        value=value,
        intent=intent,
    )
