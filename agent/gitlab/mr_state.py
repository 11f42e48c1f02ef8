"""The merge request as it stands after a push: this push's findings plus what earlier pushes found
that still stands, and the files not analysed in full across all pushes (issue 40, H2).

A new push is reviewed only where it changed things, so a summary rebuilt from the latest push alone
would drop the warnings of earlier pushes (a finding held for a person, a file never analysed) and
then claim that nothing was found. Each review records the state it left (`agent.store.mr_state`);
the next one carries every item forward unless it is fixed: found again at the new head (then this
push's verdict speaks for it), its thread closed, or its own lines changed or its file removed in the
merge request's whole diff (the same test that retires a thread, `publisher.outdated_reason`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from agent.diff import DiffIndex
from agent.gitlab.models import Discussion
from agent.gitlab.publisher import FindingToPublish, OpenThread, PublishResult, outdated_reason
from agent.store import feedback as store_feedback
from agent.store import mr_state as store_state
from agent.store import reviews as store_reviews
from agent.store.db import Database
from agent.store.reviews import FindingRow
from agent.summary import Standing
from agent.verifier import VerifiedFinding
from reviewers.kernel.contracts import Finding, NotReviewed, Severity, Workspace, merge_not_reviewed


@dataclass
class Carried:
    """What earlier pushes left that still stands, and the earlier state it came from."""

    threads: list[FindingToPublish] = field(default_factory=list)
    listed: list[FindingToPublish] = field(default_factory=list)
    held: list[FindingToPublish] = field(default_factory=list)
    not_reviewed: list[NotReviewed] = field(default_factory=list)
    previous: set[str] | None = None  # fingerprints open after the last push; None: no earlier state


def _finding(row: FindingRow, cwe: str | None = None) -> Finding:
    return Finding(
        cwe=cwe,
        path=row["path"],
        line=row["line"],
        end_line=max(row["line"], row["end_line"]),
        category=row["category"],
        severity=row["severity"],
        title=row["title"],
        body=row["body"],
        evidence=row["evidence"],
        fingerprint=row["fingerprint"],
        reviewer=row["reviewer"],
        rule=row["rule"],
    )


def _kind(row: FindingRow) -> store_state.ItemKind:
    if row["discussion_id"]:
        return "thread"
    return "listed" if row["verdict"] == "REAL" else "held"


def carry_forward(
    db: Database,
    *,
    project: str,
    mr_iid: int,
    review_id: int,
    verified: Sequence[VerifiedFinding],
    reviewed_paths: Collection[str],
    whole_diff: DiffIndex,
    workspace: Workspace,
) -> Carried:
    """The earlier pushes' findings and coverage gaps that still stand at this head."""
    previous = store_state.previous_mr_state(db, project=project, mr_iid=mr_iid, before_review=review_id)
    if previous is not None:
        rows = store_state.findings_by_id(db, [i["finding_id"] for i in previous["findings"]])
        earlier = [(i["kind"], row, i.get("cwe")) for i, row in store_state.state_items(rows, previous["findings"])]
    else:
        open_rows = store_state.earlier_open_findings(db, project=project, mr_iid=mr_iid, before_review=review_id)
        earlier = [(_kind(row), row, None) for row in open_rows]
    now = {v.finding.fingerprint: v.verdict for v in verified}
    carried = Carried(previous=None if previous is None else {i["fingerprint"] for i in previous["findings"]})
    for kind, row, cwe in earlier:
        fp = row["fingerprint"]
        if fp in now and now[fp] != "DUPLICATE":
            continue  # found again at this head: this push's verdict speaks for it
        if kind == "thread" and row["thread_state"] == "outdated":
            continue  # we retired its thread: its lines changed or its file went
        # A thread a person resolved is their vote (`record_thread_outcomes`), not a fix: the finding
        # stands while its code does, so resolving cannot make it vanish from the summary.
        thread = OpenThread(row["discussion_id"] or "", fp, row["path"], row["line"], row["evidence"], row["id"])
        if outdated_reason(thread, whole_diff, workspace, still_found=now) is not None:
            continue  # its own lines changed or its file is gone
        item = FindingToPublish(row["id"], _finding(row, cwe), row["verdict"], row["verdict_reason"])
        {"thread": carried.threads, "listed": carried.listed, "held": carried.held}[kind].append(item)
    if previous is not None:
        still_changed = set(whole_diff.paths())
        carried.not_reviewed = [
            NotReviewed.model_validate(n)
            for n in previous["not_reviewed"]
            if n.get("path") not in reviewed_paths and n.get("path") in still_changed
        ]
    return carried


def standing(
    carried: Carried, verified: Sequence[VerifiedFinding], finding_ids: Mapping[str, int], result: PublishResult
) -> tuple[Standing, store_state.MergeRequestState]:
    """The merge request's open findings after this push, for the summary and for the next push."""
    over = set(result.over_budget)
    items: list[store_state.StateItem] = []
    severities: Counter[Severity] = Counter()
    threads = listed = held = 0
    for v in verified:
        fid = finding_ids.get(v.finding.fingerprint)
        if fid is None or v.verdict not in ("REAL", "NEEDS_HUMAN_REVIEW"):
            continue
        kind: store_state.ItemKind = "held" if v.verdict != "REAL" else "listed" if fid in over else "thread"
        items.append({"fingerprint": v.finding.fingerprint, "finding_id": fid, "kind": kind, "cwe": v.finding.cwe})
    seen = {i["fingerprint"] for i in items}
    groups: tuple[tuple[store_state.ItemKind, list[FindingToPublish]], ...] = (
        ("thread", carried.threads),
        ("listed", carried.listed),
        ("held", carried.held),
    )
    for group_kind, group in groups:
        for item in group:
            fp = item.finding.fingerprint
            if fp not in seen:
                seen.add(fp)
                items.append(
                    {"fingerprint": fp, "finding_id": item.finding_id, "kind": group_kind, "cwe": item.finding.cwe}
                )
    severity_of = {v.finding.fingerprint: v.finding.severity for v in verified}
    severity_of.update({i.finding.fingerprint: i.finding.severity for i in [*carried.threads, *carried.listed]})
    for i in items:
        if i["kind"] == "held":
            held += 1
            continue
        severities[severity_of[i["fingerprint"]]] += 1
        if i["kind"] == "thread":
            threads += 1
        else:
            listed += 1
    now = {i["fingerprint"] for i in items}
    new = fixed = None
    if carried.previous is not None:
        new, fixed = len(now - carried.previous), len(carried.previous - now)
    state: store_state.MergeRequestState = {"findings": items, "not_reviewed": []}
    return Standing(dict(severities), threads, listed, held, new, fixed), state


def merged_not_reviewed(current: Sequence[NotReviewed], carried: Carried) -> list[NotReviewed]:
    return merge_not_reviewed([*current, *carried.not_reviewed])


def record_thread_outcomes(
    db: Database,
    *,
    project: str,
    mr_iid: int,
    review_id: int,
    discussions: Sequence[Discussion],
    bot_user_id: int,
    author_id: int | None,
    whole_diff: DiffIndex,
    workspace: Workspace,
    still_found: Collection[str],
) -> int:
    """Feedback from how people closed our threads (DESIGN, "Feedback"): a thread a person resolved
    after its own lines changed counts as that person accepting the finding; resolved without a
    change, as rejecting it. Judged at each new push against the MR's whole diff (the test that
    retires a thread, `publisher.outdated_reason`); each thread counts once, then is marked resolved.
    Returns how many outcomes were recorded."""
    by_id = {d.id: d for d in discussions}
    recorded = 0
    for t in store_reviews.open_threads(db, project=project, mr_iid=mr_iid):
        if t["review_id"] == review_id:
            continue
        discussion = by_id.get(t["discussion_id"])
        if discussion is None or not discussion.resolved:
            continue
        resolver = discussion.first_note.resolved_by_id
        if resolver is None or resolver == bot_user_id:
            continue
        thread = OpenThread(t["discussion_id"], t["fingerprint"], t["path"], t["line"], t["evidence"], t["finding_id"])
        changed = outdated_reason(thread, whole_diff, workspace, still_found=still_found)
        store_feedback.record_vote(
            db,
            t["finding_id"],
            user_key=f"gitlab:{resolver}",
            source="thread_outcome",
            value=1 if changed else -1,
            comment=f"resolved the thread after its code changed ({changed})"
            if changed
            else "resolved the thread without changing its code",
            voter_is_author=author_id is not None and resolver == author_id,
        )
        store_reviews.set_thread_state(db, t["finding_id"], "resolved")
        recorded += 1
    return recorded
