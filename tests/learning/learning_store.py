"""Writing reviews, findings and votes into a real store the way the pipeline does, for learning tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from agent.store import feedback as store_feedback
from agent.store import reviews as store_reviews
from agent.store.db import Database, connection
from agent.strategy import Strategy
from reviewers.contracts import Category, Finding, Severity
from reviewers.fingerprint import make_fingerprint


def diff_for(files: dict[str, list[str]], *, new: bool = False) -> str:
    """A unified diff adding `lines` at the top of each file."""
    out = []
    for path, lines in files.items():
        out.append(f"diff --git a/{path} b/{path}")
        if new:
            out += ["new file mode 100644", "--- /dev/null"]
        else:
            out.append(f"--- a/{path}")
        out.append(f"+++ b/{path}")
        out.append(f"@@ -0,0 +1,{len(lines)} @@" if new else f"@@ -1,1 +1,{len(lines) + 1} @@")
        if not new:
            out.append(" # existing first line")
        out += [f"+{ln}" for ln in lines]
    return "\n".join(out) + "\n"


@dataclass
class FindingSpec:
    path: str
    line: int
    category: Category = "security"
    severity: Severity = "medium"
    fingerprint: str | None = None  # derived from path/line/category when absent
    votes: Sequence[tuple[str, int]] = ()  # (user_key, value) in the order they were cast

    def finding(self) -> Finding:
        fp = self.fingerprint or make_fingerprint_for(self)
        return Finding(
            path=self.path,
            line=self.line,
            end_line=self.line,
            category=self.category,
            severity=self.severity,
            title=f"{self.category} issue",
            body="explained",
            evidence="x",
            fingerprint=fp,
            reviewer=self.category,
        )


def make_fingerprint_for(spec: FindingSpec) -> str:
    return make_fingerprint(path=spec.path, category=spec.category, rule="test", evidence=f"{spec.path}:{spec.line}")


@dataclass
class ReviewSpec:
    strategy: Strategy
    findings: list[FindingSpec] = field(default_factory=list)
    cost_tokens: int = 0
    status: str = "done"
    source: store_reviews.ReviewSource = "gitlab"


def insert_review(
    db: Database,
    spec: ReviewSpec,
    *,
    project: str,
    mr_iid: int | None,
    head_sha: str,
    snapshot: dict[str, object] | None,
    created_at: datetime,
    parent_review_id: int | None = None,
) -> int:
    """One review through the store's own functions (plus its time, which only SQL can set)."""
    review_id = store_reviews.create_review(
        db,
        source=spec.source,
        project=project,
        mr_iid=mr_iid,
        title=str((snapshot or {}).get("title", "")),
        head_sha=head_sha,
        is_shadow=parent_review_id is not None,
        parent_review_id=parent_review_id,
        snapshot=snapshot,
    )
    store_reviews.set_strategy(
        db,
        review_id,
        strategy_json=spec.strategy.to_json(),
        strategy_text=spec.strategy.render(),
        strategy_source="model",
    )
    ids = store_reviews.save_findings(db, review_id, [(f.finding(), "REAL", "evidence found") for f in spec.findings])
    for fs in spec.findings:
        finding_id = ids[fs.finding().fingerprint]
        if parent_review_id is None:
            store_reviews.record_posted(
                db, finding_id, discussion_id=f"d{finding_id}", note_id=finding_id, position_fallback=False
            )
        for user_key, value in fs.votes:
            source = "thread_outcome" if user_key.startswith("outcome:") else "emoji"
            store_feedback.record_vote(db, finding_id, user_key=user_key, source=source, value=value)  # type: ignore[arg-type]
    if spec.status == "done":
        store_reviews.mark_done(db, review_id, stats={}, cost_tokens=spec.cost_tokens)
    elif spec.status == "failed":
        store_reviews.mark_failed(db, review_id, "boom")
    with connection(db) as conn:
        conn.execute("UPDATE reviews SET created_at = %s WHERE id = %s", (created_at, review_id))
    return review_id
