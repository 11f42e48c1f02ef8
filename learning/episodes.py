"""Episodes: each finished review read back from Postgres as (s1, z, labeled findings, reward).

An episode is what every dataset is cut from. Reading is the only impure step (`read_review_rows`);
`episodes_from_rows` is a pure function over the rows, so labels, inheritance by shadow strategies
and rewards are tested without a database. Shadow strategies (reviews with `is_shadow` and a
`parent_review_id`) were never posted, so their findings borrow the labels of the parent's findings
they match; they share the parent's snapshot and hence its prompt, which is what makes same-MR
preference pairs possible.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from psycopg.rows import dict_row
from pydantic import ValidationError

from agent.diff import parse_unified_diff
from agent.repo_config import parse_repo_config
from agent.store.db import Database, connection
from agent.strategy import Strategy
from agent.strategy_prompt import render_s1
from learning.feedback_labels import (
    FeedbackRewardConfig,
    FindingLabel,
    LabeledFinding,
    Vote,
    VoteValue,
    finding_label,
    inherit_label,
    review_reward,
)
from learning.scrub import scrub_secrets
from reviewers.kernel.errors import ReviewloopError

# Our own replays and evaluations are not human-reviewed merge requests: training on them would
# leak the eval gate's environment into the training set.
TRAINABLE_SOURCES: tuple[str, ...] = ("gitlab", "local", "diff", "demo")
FINISHED_STATUSES: tuple[str, ...] = ("done", "superseded")

MRKey = tuple[str, str]  # (project, MR iid or "review:<root id>" for sources without an MR)
S1Renderer = Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True, slots=True)
class ReviewRecord:
    id: int
    project: str
    mr_iid: int | None
    head_sha: str | None
    created_at: datetime
    is_shadow: bool
    parent_review_id: int | None
    strategy: Mapping[str, Any]
    snapshot: Mapping[str, Any] | None
    cost_tokens: int


@dataclass(frozen=True, slots=True)
class FindingRecord:
    id: int
    review_id: int
    fingerprint: str
    path: str
    line: int
    category: str
    severity: str


@dataclass(frozen=True, slots=True)
class VoteRecord:
    finding_id: int
    vote: Vote


@dataclass(frozen=True, slots=True)
class ReviewRows:
    reviews: list[ReviewRecord]
    findings: list[FindingRecord]
    votes: list[VoteRecord]


@dataclass(frozen=True, slots=True)
class Episode:
    """One strategy and what it earned. `prompt_s1` and `completion` are already scrubbed."""

    review_id: int
    root_review_id: int  # the posted review (itself, or a shadow's parent)
    mr_key: MRKey
    created_at: datetime  # the posted review's time: a shadow belongs to its parent's moment
    is_shadow: bool
    prompt_s1: str
    completion: str
    reward: float
    findings: tuple[LabeledFinding, ...]
    snapshot: Mapping[str, Any]

    @property
    def labeled_count(self) -> int:
        return sum(1 for f in self.findings if f.label != "unknown")


def s1_for_snapshot(snapshot: Mapping[str, Any]) -> str:
    """The state s1 for a stored snapshot, by serving's one renderer (`agent.strategy_prompt.render_s1`).

    A snapshot that stored the exact s1 the model saw (`s1`) is used as it is. Otherwise s1 is
    rendered again from the diff and config, with the history the snapshot carries (a replay case
    or a synthesised one keeps its team's votes there); a stored review's history of that moment is
    not in its snapshot, so it is left out rather than recomputed from today's feedback (which would
    leak the labels into the prompt).
    """
    stored = snapshot.get("s1")
    if isinstance(stored, str) and stored:
        return stored
    files = parse_unified_diff(str(snapshot.get("diff") or ""))
    config_text = snapshot.get("config_text")
    history = snapshot.get("history") or {}
    votes = snapshot.get("rule_votes") or {}
    budget = snapshot.get("review_budget")
    config = parse_repo_config(config_text) if isinstance(config_text, str) and config_text else None
    return render_s1(
        title=str(snapshot.get("title") or ""),
        description=str(snapshot.get("description") or ""),
        files=files,
        config=config,
        history={str(p): float(r) for p, r in history.items()},
        rule_votes={str(k): (int(v[0]), int(v[1])) for k, v in votes.items()},
        # a snapshot's own budget (a synthesised case's), else its repository's, as serving showed it
        review_budget=int(budget) if isinstance(budget, int) else config.review_budget if config else None,
    )


def read_review_rows(db: Database, *, since: datetime | None) -> ReviewRows:
    """Finished, trainable reviews (and their shadows) since `since`, with findings and current votes."""
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        reviews = cur.execute(
            "SELECT r.id, r.project, r.mr_iid, r.head_sha, r.created_at, r.is_shadow, r.parent_review_id,"
            " r.strategy, r.snapshot, r.cost_tokens"
            " FROM reviews r LEFT JOIN reviews p ON p.id = r.parent_review_id"
            " WHERE r.strategy IS NOT NULL AND r.status = ANY(%(statuses)s)"
            " AND coalesce(p.source, r.source) = ANY(%(sources)s)"
            " AND (%(since)s::timestamptz IS NULL OR coalesce(p.created_at, r.created_at) >= %(since)s)"
            " ORDER BY r.created_at, r.id",
            {"statuses": list(FINISHED_STATUSES), "sources": list(TRAINABLE_SOURCES), "since": since},
        ).fetchall()
        ids = [int(r["id"]) for r in reviews]
        findings = cur.execute(
            "SELECT id, review_id, fingerprint, path, line, category, severity FROM findings"
            " WHERE review_id = ANY(%s) ORDER BY id",
            (ids,),
        ).fetchall()
        votes = cur.execute(
            "SELECT fb.finding_id, fb.user_key, fb.value, fb.updated_at FROM feedback fb"
            " JOIN findings f ON f.id = fb.finding_id WHERE f.review_id = ANY(%s) ORDER BY fb.id",
            (ids,),
        ).fetchall()
    return ReviewRows(
        reviews=[ReviewRecord(**r) for r in reviews],
        findings=[FindingRecord(**f) for f in findings],
        votes=[
            VoteRecord(
                finding_id=int(v["finding_id"]),
                vote=Vote(user_key=str(v["user_key"]), value=cast(VoteValue, int(v["value"])), at=v["updated_at"]),
            )
            for v in votes
        ],
    )


@dataclass(frozen=True, slots=True)
class EpisodeBuild:
    episodes: list[Episode]
    skipped: dict[str, int]  # reason → reviews left out, reported on the dataset card


def _mr_key(review: ReviewRecord, root_id: int) -> MRKey:
    return (review.project, str(review.mr_iid) if review.mr_iid is not None else f"review:{root_id}")


def episodes_from_rows(
    rows: ReviewRows, *, config: FeedbackRewardConfig, render_s1_for: S1Renderer = s1_for_snapshot
) -> EpisodeBuild:
    """Label every finding, let shadows inherit, and score each review's strategy."""
    votes_by_finding: dict[int, list[Vote]] = defaultdict(list)
    for v in rows.votes:
        votes_by_finding[v.finding_id].append(v.vote)
    findings_by_review: dict[int, list[FindingRecord]] = defaultdict(list)
    for f in rows.findings:
        findings_by_review[f.review_id].append(f)
    by_id = {r.id: r for r in rows.reviews}

    def own_labels(review_id: int) -> list[LabeledFinding]:
        return [
            LabeledFinding(f.fingerprint, f.path, f.line, f.category, f.severity, finding_label(votes_by_finding[f.id]))
            for f in findings_by_review[review_id]
        ]

    skipped: dict[str, int] = defaultdict(int)
    episodes: list[Episode] = []
    prompts: dict[int, str] = {}
    for review in rows.reviews:
        root = by_id.get(review.parent_review_id) if review.is_shadow and review.parent_review_id else review
        if root is None:
            skipped["shadow without a finished parent"] += 1
            continue
        snapshot = review.snapshot or root.snapshot
        if not snapshot:
            skipped["no snapshot"] += 1
            continue
        try:
            z = Strategy.model_validate(review.strategy)
        except ValidationError:
            skipped["strategy fails the current schema"] += 1
            continue
        if root.id not in prompts:
            try:
                prompts[root.id] = scrub_secrets(render_s1_for(snapshot))
            except ReviewloopError:
                skipped["snapshot does not render (bad diff or config)"] += 1
                continue
        findings = own_labels(review.id)
        if review is not root:
            posted = own_labels(root.id)
            findings = [
                LabeledFinding(
                    f.fingerprint,
                    f.path,
                    f.line,
                    f.category,
                    f.severity,
                    inherit_label(f, posted, line_window=config.match_line_window),
                )
                for f in findings
            ]
        labels: list[FindingLabel] = [f.label for f in findings]
        episodes.append(
            Episode(
                review_id=review.id,
                root_review_id=root.id,
                mr_key=_mr_key(root, root.id),
                created_at=root.created_at,
                is_shadow=review is not root,
                prompt_s1=prompts[root.id],
                completion=scrub_secrets(z.to_json()),
                reward=review_reward(labels, cost_tokens=review.cost_tokens, config=config),
                findings=tuple(findings),
                snapshot=snapshot,
            )
        )
    return EpisodeBuild(episodes=episodes, skipped=dict(skipped))


def group_by_prompt(episodes: Sequence[Episode]) -> dict[tuple[MRKey, str], list[Episode]]:
    """Strategies written for the same MR state: the candidates of a preference pair."""
    groups: dict[tuple[MRKey, str], list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[(e.mr_key, e.prompt_s1)].append(e)
    return dict(groups)
