"""Loading a snapshot from each kind of source: a local git range, a bare diff, a replay record.

GitLab merge requests are loaded by `agent.gitlab.review.load_gitlab_snapshot` on top of the platform port.
"""

from __future__ import annotations

from agent.context import NotReviewed, ReviewRequest, Snapshot, head_files_for_snapshot, read_config_text
from agent.diff import parse_unified_diff
from agent.gitrepo import open_repository
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.kernel.contracts import FileChange, Workspace
from reviewers.kernel.errors import InputError


def not_reviewed_files(files: list[FileChange]) -> list[NotReviewed]:
    """Changed files the diff itself leaves nothing to read in, each with the reason, for the summary.
    (Generated, oversized and oddly encoded files are named by the reviewers, which still scan them
    for what is safe to look for.)"""
    out = []
    for f in files:
        if f.status == "deleted":
            continue
        if f.is_binary:
            out.append(NotReviewed(path=f.path, reason="binary", detail="binary file"))
        elif f.collapsed:
            why = f.collapsed_reason or "the host sent no diff for it"
            out.append(NotReviewed.from_words(f.path, why))
    return out


def load_local(request: ReviewRequest) -> tuple[Snapshot, Workspace, list[FileChange]]:
    if not request.repo_path or not request.base or not request.head:
        raise InputError("a local review needs a repository path, --base and --head")
    repo = open_repository(request.repo_path)
    base_sha = repo.resolve(request.base)
    head_sha = repo.resolve(request.head)
    diff = repo.diff(base_sha, head_sha)
    files = parse_unified_diff(diff)
    workspace = repo.workspace(head_sha)
    workspace.read_files([f.path for f in files if f.status != "deleted" and not f.is_binary])
    snapshot = Snapshot(
        title=request.title or f"{request.base}..{request.head}",
        description=request.description,
        diff=diff,
        base_sha=base_sha,
        start_sha=base_sha,
        head_sha=head_sha,
        not_reviewed=not_reviewed_files(files),
        files=head_files_for_snapshot(files, workspace),
        config_text=read_config_text(workspace),
    )
    return snapshot, workspace, files


def load_diff(request: ReviewRequest) -> tuple[Snapshot, Workspace, list[FileChange]]:
    text = request.diff_text or ""
    files = parse_unified_diff(text) if text.strip() else []
    # An empty diff is an empty change, reviewed as an empty commit range is (nothing found, exit 0);
    # text that holds no file change is not a diff at all.
    if text.strip() and not files:
        raise InputError("the input holds no file changes (is it a unified diff?)")
    # files at head, when the caller has them, make a full review; else the hunks are all there is
    workspace: Workspace = SnapshotWorkspace(request.files) if request.files else DiffWorkspace(files)
    snapshot = Snapshot(
        title=request.title or "diff",
        description=request.description,
        diff=text,
        not_reviewed=not_reviewed_files(files),
        files=dict(request.files or {}),
        config_text=(request.files or {}).get(".reviewloop.toml"),
    )
    return snapshot, workspace, files


def load_replay(request: ReviewRequest) -> tuple[Snapshot, Workspace, list[FileChange]]:
    """A recorded merge request: its diff plus (optionally) its files at head."""
    text = request.diff_text or ""
    files = parse_unified_diff(text)
    workspace: Workspace = SnapshotWorkspace(request.files) if request.files else DiffWorkspace(files)
    snapshot = Snapshot(
        title=request.title,
        description=request.description,
        diff=text,
        head_sha=request.head,
        base_sha=request.base,
        not_reviewed=not_reviewed_files(files),
        files=dict(request.files or {}),
        config_text=(request.files or {}).get(".reviewloop.toml"),
    )
    return snapshot, workspace, files
