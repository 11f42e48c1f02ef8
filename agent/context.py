"""What a review looks at, for every kind of source, as one serialisable snapshot.

A `ReviewRequest` says where the merge request is (a GitLab MR, a local git range, a bare diff, a
replay snapshot). `load_snapshot` turns it into a `Snapshot`: title, description, the unified diff,
the SHAs, and what could not be reviewed. The snapshot goes into the graph's checkpointed state
and into `reviews.snapshot` (the replay environment of the learning loop), so it holds plain data
only; `build_context` turns it back into the `ReviewContext` the reviewers read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from agent.diff import parse_unified_diff, quote_path
from agent.repo_config import CONFIG_FILE, parse_repo_config, with_floor
from reviewers.kernel.contracts import FileChange, NotReviewed, RepoConfig, ReviewContext, Workspace

__all__ = ["NotReviewed", "ReviewRequest", "Snapshot", "build_context", "render_unified_diff"]

Source = Literal["gitlab", "local", "diff", "replay", "eval", "demo"]
SNAPSHOT_MAX_FILE_BYTES = 256 * 1024  # files at head kept for replay; larger ones are re-read from the host
SNAPSHOT_MAX_FILES = 200


class ReviewRequest(BaseModel):
    """Where the merge request is. Exactly the fields of its source are set."""

    source: Source
    project: str = ""
    mr_iid: int | None = None
    title: str = ""
    description: str = ""
    repo_path: str | None = None
    base: str | None = None
    head: str | None = None
    diff_text: str | None = None
    files: dict[str, str] | None = None  # replay/eval: the files at head


class Snapshot(BaseModel):
    title: str = ""
    description: str = ""
    web_url: str = ""  # the merge request's page (GitLab reviews), for the dashboard's links
    diff: str = ""
    base_sha: str | None = None
    start_sha: str | None = None
    head_sha: str | None = None
    not_reviewed: list[NotReviewed] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)  # changed files at head (bounded), for replay
    config_text: str | None = None
    # What the summary says about the settings: an invalid file, a change to it, what no file may turn off
    config_notes: list[str] = Field(default_factory=list)


def render_unified_diff(files: Sequence[FileChange]) -> str:
    """Render parsed files back into `git diff` text (used for hosts that return per-file patches)."""
    out: list[str] = []
    for f in files:
        # Paths are data: GitLab allows a newline, a tab or a quote in one, and git quotes them (C
        # style) in its headers, so the text parses back into the same paths.
        a, b = quote_path(f"a/{f.old_path}"), quote_path(f"b/{f.path}")
        out.append(f"diff --git {a} {b}")
        if f.status == "added":
            out.append(f"new file mode {f.new_mode or '100644'}")
        elif f.status == "deleted":
            out.append(f"deleted file mode {f.old_mode or '100644'}")
        elif f.old_mode and f.new_mode and f.old_mode != f.new_mode:
            out += [f"old mode {f.old_mode}", f"new mode {f.new_mode}"]
        if f.status == "renamed":
            out += [f"rename from {quote_path(f.old_path)}", f"rename to {quote_path(f.path)}"]
        if f.is_binary:
            out.append(f"Binary files {a} and {b} differ")
            continue
        if not f.hunks:
            continue
        out.append("--- /dev/null" if f.status == "added" else f"--- {a}")
        out.append("+++ /dev/null" if f.status == "deleted" else f"+++ {b}")
        for h in f.hunks:
            out.append(f"@@ -{h.old_start},{h.old_count} +{h.new_start},{h.new_count} @@{h.header}")
            prefix = {"add": "+", "del": "-", "context": " "}
            out.extend(prefix[ln.kind] + ln.text for ln in h.lines)
    return "\n".join(out) + ("\n" if out else "")


def head_files_for_snapshot(files: Sequence[FileChange], workspace: Workspace) -> dict[str, str]:
    """The changed files' text at head (bounded), so a replay can review without the host."""
    kept: dict[str, str] = {}
    for f in files[:SNAPSHOT_MAX_FILES]:
        if f.status == "deleted" or f.is_binary:
            continue
        text = workspace.read_file(f.path)
        if text is not None and len(text.encode("utf-8", "surrogateescape")) <= SNAPSHOT_MAX_FILE_BYTES:
            kept[f.path] = text
    return kept


def build_context(
    snapshot: Snapshot,
    *,
    workspace: Workspace,
    project: str | None = None,
    mr_iid: int | None = None,
    files: list[FileChange] | None = None,
) -> ReviewContext:
    """The reviewers' view of a snapshot. `files` may be passed when already parsed."""
    parsed = files if files is not None else parse_unified_diff(snapshot.diff)
    config = with_floor(parse_repo_config(snapshot.config_text) if snapshot.config_text else RepoConfig())
    return ReviewContext(
        title=snapshot.title,
        description=snapshot.description,
        files=parsed,
        workspace=workspace,
        config=config,
        project=project,
        mr_iid=mr_iid,
        head_sha=snapshot.head_sha,
        base_sha=snapshot.base_sha,
    )


def read_config_text(workspace: Workspace) -> str | None:
    return workspace.read_file(CONFIG_FILE)


WorkspaceFactory = Callable[[ReviewRequest, Snapshot], Workspace]
SnapshotLoader = Callable[[ReviewRequest], tuple[Snapshot, Workspace]]
FileMap = Mapping[str, str]
