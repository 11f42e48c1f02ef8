"""Reviewing a GitLab merge request: load it, run the graph, publish, retire outdated threads.

This is what the worker's job calls. It is safe to call again for the same (project, MR, head):
a finished review is returned as is, an unfinished one is resumed from its checkpoint under the
same review row, and the publisher posts only what is not on the merge request yet. On a new push,
only the files the new commits touched are reviewed; our threads are judged against the merge
request's whole diff at the new head, and only those whose own lines changed or whose file was
removed are resolved (or marked, per the repository's config).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import ConnectionPool

from agent.context import (
    NotReviewed,
    ReviewRequest,
    Snapshot,
    head_files_for_snapshot,
    render_unified_diff,
)
from agent.diff import DiffIndex
from agent.gitlab.client import GitLabPlatform
from agent.gitlab.models import DiffVersions
from agent.gitlab.mr_state import carry_forward, merged_not_reviewed, record_thread_outcomes
from agent.gitlab.mr_state import standing as standing_after
from agent.gitlab.projects import confirm_project_allowed
from agent.gitlab.publisher import (
    FindingToPublish,
    OpenThread,
    PostedThread,
    PublishResult,
    publish_review,
    resolve_outdated,
)
from agent.graph import ReviewState
from agent.loaders import not_reviewed_files
from agent.pipeline import outcome_from_state, outcome_meta, run_review, unreached_files
from agent.repo_config import CONFIG_FILE, describe_config_change, target_config
from agent.reporter import model_gaps_in
from agent.runtime import Runtime
from agent.service_settings import Settings
from agent.store import reviews as store_reviews
from agent.store.mr_state import (
    MergeRequestState,
    mr_author_of,
    record_mr_state,
    relabel_superseded_by_late_delivery,
)
from agent.strategy import Strategy
from agent.strategy_model import StrategyModelSource
from agent.summary import BelowFloor, summary_opening
from agent.verdicts.posting import Posting
from agent.verifier import VerifiedFinding
from reviewers.kernel.contracts import FileChange, LLMPort, ReviewerResult, Workspace, merge_not_reviewed
from reviewers.kernel.errors import PlatformError

log = logging.getLogger(__name__)


@dataclass
class ReviewDeps:
    """Everything a GitLab review needs, built once per worker process."""

    pool: ConnectionPool[Any]
    dsn: str
    platform: GitLabPlatform
    llm: LLMPort | None = None
    strategy_model: StrategyModelSource | None = None
    shadow_strategies: int = 0
    allowed_urls: frozenset[str] = field(default_factory=frozenset)
    allowed_projects: frozenset[str] = field(default_factory=frozenset)
    review_deadline_s: float | None = None
    hold_by_track_record: bool = True
    posting: Posting = "proven"
    """REVIEWLOOP_GITLAB_PROJECTS: numeric ids and paths; empty = every project."""


def build_deps(settings: Settings, *, pool: ConnectionPool[Any], dsn: str, llm: LLMPort | None = None) -> ReviewDeps:
    if not settings.gitlab_url or settings.gitlab_token is None:
        raise PlatformError("REVIEWLOOP_GITLAB_URL and REVIEWLOOP_GITLAB_TOKEN must be set to review GitLab")
    from agent.session import strategy_model_source

    platform = GitLabPlatform(settings.gitlab_url, settings.gitlab_token.get_secret_value())
    return ReviewDeps(
        pool=pool,
        dsn=dsn,
        platform=platform,
        llm=llm,
        strategy_model=strategy_model_source(settings, pool, llm),
        shadow_strategies=settings.shadow_strategies,
        # links and images may point into the merge request's own GitLab, nowhere else (agent.sanitize)
        allowed_urls=frozenset({settings.gitlab_url, settings.gitlab_url.rstrip("/") + "/"}),
        allowed_projects=frozenset(settings.gitlab_project_allowlist),
        review_deadline_s=settings.review_deadline_s,
        hold_by_track_record=settings.hold_by_track_record,
        posting=settings.posting,
    )


def load_gitlab_snapshot(
    platform: GitLabPlatform,
    request: ReviewRequest,
    *,
    since_head: str | None,
    on_author: Callable[[int], None] | None = None,
) -> tuple[Snapshot, Workspace, list[FileChange]]:
    """The MR at its newest version; with `since_head`, only files changed since that commit.
    `on_author` hears the MR author's GitLab user id, as GitLab's API answered it."""
    project, iid = request.project, int(request.mr_iid or 0)
    mr = platform.merge_request(project, iid)
    if on_author is not None and mr.author_id:
        on_author(mr.author_id)
    mr_diff = platform.diffs(project, iid)
    versions = mr_diff.versions
    files = mr_diff.files
    not_reviewed = list(mr_diff.not_reviewed)  # what GitLab sent no diff for, with its words
    if since_head and since_head != versions.head_sha:
        touched = platform.changed_paths(project, from_sha=since_head, to_sha=versions.head_sha)
        if touched is not None:
            files = [f for f in files if f.path in touched or f.old_path in touched]
    workspace = platform.workspace(project, versions.head_sha, changed_paths=[f.path for f in files])
    # The settings are the target branch's (at the MR's base), never the head's: the author must not
    # be able to switch the review off. A change to them in the MR is reported, not applied.
    base_config = platform.read_file(project, CONFIG_FILE, versions.base_sha)
    config_text, config_notes = target_config(base_config)
    config_notes += describe_config_change(base_config, workspace.read_file(CONFIG_FILE))
    snapshot = Snapshot(
        title=mr.title,
        description=mr.description,
        web_url=mr.web_url,
        diff=render_unified_diff(files),
        base_sha=versions.base_sha,
        start_sha=versions.start_sha,
        head_sha=versions.head_sha,
        # and the binary files, which GitLab diffs as such: named as a local review names them
        not_reviewed=merge_not_reviewed(
            [*not_reviewed, *(n for n in not_reviewed_files(files) if n.reason == "binary")]
        ),
        files=head_files_for_snapshot(files, workspace),
        config_text=config_text,
        config_notes=config_notes,
    )
    return snapshot, workspace, files


def _cut_short(state: ReviewState) -> list[NotReviewed]:
    results = [ReviewerResult.model_validate(r) for r in state.get("reviewer_results", []) if not r.get("execution")]
    return unreached_files(results)


def make_publisher(deps: ReviewDeps, request: ReviewRequest, *, since_head: str | None = None) -> Any:
    """The reporter's publishing step; `since_head`: the head of the last reviewed push, when this
    review covers only what changed since (the summary then says so)."""
    project, iid = request.project, int(request.mr_iid or 0)

    def publish(
        state: ReviewState, verified: Sequence[VerifiedFinding], finding_ids: Mapping[str, int], runtime: Runtime
    ) -> dict[str, Any]:
        review_id = state["review_id"]
        snapshot = Snapshot.model_validate(state["snapshot"])
        context, index = runtime.context_and_index(review_id, state["request"], state["snapshot"])
        items = [
            FindingToPublish(finding_ids[v.finding.fingerprint], v.finding, v.verdict, v.reason)
            for v in verified
            if v.finding.fingerprint in finding_ids
        ]
        posted = store_reviews.posted_fingerprints(deps.pool, project=project, mr_iid=iid)
        existing = {fp: PostedThread(t.discussion_id, t.note_id or 0, False) for fp, t in posted.items()}

        def record(finding_id: int, discussion_id: str, note_id: int, fallback: bool) -> None:
            store_reviews.record_posted(
                deps.pool, finding_id, discussion_id=discussion_id, note_id=note_id, position_fallback=fallback
            )

        versions = DiffVersions(str(snapshot.base_sha), str(snapshot.start_sha), str(snapshot.head_sha))
        head_sha = str(snapshot.head_sha or "")
        # what GitLab did not send, and what a step budget, an analyzer budget or the deadline cut short
        this_push = merge_not_reviewed([*snapshot.not_reviewed, *_cut_short(state)])
        # The merge request's whole diff at this head: threads and earlier findings are judged against
        # it, never against the files this push touched (a README-only push changes nothing they say).
        current, whole_index = True, index  # a first review's diff is the whole MR's already
        if since_head is not None:
            whole = deps.platform.diffs(project, iid)
            current = whole.versions.head_sha == head_sha  # else the MR moved on: the newer review judges
            whole_index = DiffIndex(whole.files) if current else index
        still_found = {v.finding.fingerprint for v in verified}
        outdated = 0
        if current:
            record_thread_outcomes(
                deps.pool,
                project=project,
                mr_iid=iid,
                review_id=review_id,
                discussions=deps.platform.discussions(project, iid),
                bot_user_id=deps.platform.bot_user_id(),
                author_id=mr_author_of(deps.pool, review_id),
                whole_diff=whole_index,
                workspace=context.workspace,
                still_found=still_found,
            )
            outdated = _retire_outdated(
                deps,
                request,
                review_id,
                whole_diff=whole_index,
                workspace=context.workspace,
                resolve=context.config.resolve_outdated,
                still_found=still_found,
            )
        carried = carry_forward(
            deps.pool,
            project=project,
            mr_iid=iid,
            review_id=review_id,
            verified=verified,
            reviewed_paths={f.path for f in context.files},
            whole_diff=whole_index,
            workspace=context.workspace,
        )
        not_reviewed = merged_not_reviewed(this_push, carried)
        # what the local report says beside the findings, the note says too
        meta = outcome_meta(outcome_from_state(review_id, state)) if state.get("strategy") else {}
        model_gaps = model_gaps_in(meta)
        below = meta.get("below_min_severity")
        below_floor = BelowFloor(str(below["min_severity"]), int(below["count"])) if below else None
        state_left: list[MergeRequestState] = []

        def opening(result: PublishResult) -> str:
            standing, mr_state = standing_after(carried, verified, finding_ids, result)
            mr_state["not_reviewed"] = [n.model_dump(mode="json") for n in not_reviewed]
            state_left.append(mr_state)
            return summary_opening(
                strategy=Strategy.model_validate(state.get("strategy") or {"change_type": "mixed"}),
                files=context.files,
                verified=verified,
                not_reviewed=not_reviewed,
                head_sha=head_sha,
                max_discussions=context.config.max_discussions,
                standing=standing,
                config_notes=snapshot.config_notes,
                since_head=since_head,
                model_steps_not_completed=model_gaps,
                below_floor=below_floor,
            )

        result = publish_review(
            deps.platform,
            project=project,
            mr_iid=iid,
            versions=versions,
            diff_index=index,
            findings=items,
            existing=existing,
            summary=opening,
            record_posted=record,
            not_reviewed=not_reviewed,
            allowed_urls=deps.allowed_urls,
            max_discussions=context.config.max_discussions,
            earlier_listed=carried.listed,
            earlier_held=carried.held,
            model_steps_not_completed=model_gaps,
        )
        if result.summary_note_id is not None:
            store_reviews.record_summary_note(deps.pool, review_id, note_id=result.summary_note_id)
        if state_left:
            record_mr_state(deps.pool, review_id, state_left[-1])
        return {
            "posted": sum(1 for p in result.published if not p.reused),
            "reused": sum(1 for p in result.published if p.reused),
            "fallbacks": sum(1 for p in result.published if p.fallback),
            "over_budget": len(result.over_budget),
            "summary_note_id": result.summary_note_id,
            "outdated": outdated,
        }

    return publish


def _retire_outdated(
    deps: ReviewDeps,
    request: ReviewRequest,
    review_id: int,
    *,
    whole_diff: DiffIndex,
    workspace: Workspace,
    resolve: bool,
    still_found: Collection[str],
) -> int:
    """Resolve or mark our open threads from earlier reviews whose own lines changed or whose file was
    removed, judged against the merge request's whole diff at this head (base..head), not against the
    files this push touched: a README-only push leaves every thread as it was."""
    project, iid = request.project, int(request.mr_iid or 0)
    threads = store_reviews.open_threads(deps.pool, project=project, mr_iid=iid)
    earlier = [
        OpenThread(t["discussion_id"], t["fingerprint"], t["path"], t["line"], t["evidence"], t["finding_id"])
        for t in threads
        if t["review_id"] != review_id
    ]
    if not earlier:
        return 0
    acted = resolve_outdated(
        deps.platform,
        project,
        iid,
        earlier,
        whole_diff,
        workspace,
        resolve=resolve,
        still_found=still_found,
    )
    for t in acted:
        if t.finding_id is not None:
            store_reviews.set_thread_state(deps.pool, t.finding_id, "outdated")
    return len(acted)


def review_gitlab_merge_request(
    deps: ReviewDeps, *, project: str, mr_iid: int, head_sha: str | None, event_id: int | None = None
) -> int:
    """Review the MR at its newest version; returns the review id. Idempotent per head commit.

    `project` is a numeric id (what the webhook's job carries) or, from the command line, a path:
    a path is turned into its id first, so reviews are stored under the id that votes join on.
    """
    if not project.isdigit():
        project = str(deps.platform.project_id(project))
    confirm_project_allowed(deps.platform, project, deps.allowed_projects)
    versions = deps.platform.latest_version(project, mr_iid)
    head = versions.head_sha
    if head_sha and head_sha != head:
        log.info(
            "MR %s!%s moved from %s to %s since the event; reviewing the newest head", project, mr_iid, head_sha, head
        )
    status = store_reviews.review_status(deps.pool, project=project, mr_iid=mr_iid, head_sha=head)
    if status is not None and status[1] == "done":
        _label_late_delivery(
            deps, project=project, mr_iid=mr_iid, event_id=event_id, event_head=head_sha, reviewed_head=head
        )
        return status[0]
    previous = store_reviews.last_reviewed_head(deps.pool, project=project, mr_iid=mr_iid)
    request = ReviewRequest(source="gitlab", project=project, mr_iid=mr_iid, head=head)

    def record_author(author_id: int) -> None:
        # the author's votes on this review are theirs alone (agent.store.rejections)
        store_reviews.record_mr_author(deps.pool, review_id, author_id=author_id)

    def loader(req: ReviewRequest) -> tuple[Snapshot, Workspace, list[FileChange]]:
        return load_gitlab_snapshot(deps.platform, req, since_head=previous, on_author=record_author)

    def workspace_for(req: ReviewRequest, snapshot: Snapshot) -> Workspace:
        return deps.platform.workspace(project, str(snapshot.head_sha), changed_paths=list(snapshot.files))

    runtime = Runtime(
        pool=deps.pool,
        llm=deps.llm,
        loaders={"gitlab": loader},
        workspace_for=workspace_for,
        publisher=make_publisher(deps, request, since_head=previous if previous != head else None),
        strategy_model=deps.strategy_model,
        shadow_strategies=deps.shadow_strategies,
        review_deadline_s=deps.review_deadline_s,
        hold_by_track_record=deps.hold_by_track_record,
        posting=deps.posting,
    )
    review_id = store_reviews.create_review(
        deps.pool, source="gitlab", project=project, mr_iid=mr_iid, head_sha=head, previous_head_sha=previous
    )
    outcome = run_review(runtime, request, dsn=deps.dsn, review_id=review_id)
    _label_late_delivery(
        deps, project=project, mr_iid=mr_iid, event_id=event_id, event_head=head_sha, reviewed_head=head
    )
    return outcome.review_id


def _label_late_delivery(
    deps: ReviewDeps,
    *,
    project: str,
    mr_iid: int,
    event_id: int | None,
    event_head: str | None,
    reviewed_head: str,
) -> None:
    """An event for an older head than the one reviewed (a late delivery, or pushes since) keeps the
    event history true: the events it superseded at intake were not superseded by a newer push."""
    if event_id is not None and event_head and event_head != reviewed_head:
        relabel_superseded_by_late_delivery(
            deps.pool,
            project=project,
            mr_iid=mr_iid,
            event_id=event_id,
            event_head=event_head,
            reviewed_head=reviewed_head,
        )
