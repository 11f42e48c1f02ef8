"""Writing reviews, findings and votes into a real store the way the pipeline does, for learning tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agent.store import feedback as store_feedback
from agent.store import reviews as store_reviews
from agent.store.db import Database, connection
from agent.strategy import Strategy
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Category, Finding, Severity


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


# --- a synthetic review history with a learnable signal ---------------------------------------------

PACKAGES = ("shop", "billing", "auth", "search", "inventory", "users", "orders", "reports", "media", "notify")
WORDS = ("cart", "invoice", "session", "index", "stock", "profile", "refund", "export", "token", "query", "upload")
MR_KINDS = ("sql", "docs", "tests", "config")


@dataclass(frozen=True)
class SyntheticStore:
    """A database holding a synthetic review history, and the datasets built from it."""

    dsn: str
    dataset_dir: Path


@dataclass
class SyntheticMR:
    kind: str
    path: str
    snapshot: dict[str, object]
    good: Strategy
    bad: Strategy


def strategy_for(kind: str, path: str) -> Strategy:
    """What a reviewer team would call the right plan for each kind of change."""
    plans: dict[str, dict[str, object]] = {
        "sql": {
            "change_type": "feature",
            "risk_areas": [{"path": path, "why": "sql built from input"}],
            "plan": [{"reviewer": "security", "focus_paths": [path], "checks": "injection", "step_budget": 6}],
        },
        "docs": {"change_type": "docs", "stop_condition": "nothing to review: no code changed"},
        "tests": {
            "change_type": "tests",
            "plan": [{"reviewer": "test_impact", "focus_paths": [path], "checks": "changed tests", "step_budget": 4}],
        },
        "config": {
            "change_type": "config",
            "risk_areas": [{"path": path, "why": "settings change"}],
            "plan": [{"reviewer": "security", "focus_paths": [path], "checks": "unsafe defaults", "step_budget": 4}],
        },
    }
    return Strategy.model_validate(plans[kind])


def synthetic_mrs(n: int, *, seed: int) -> list[SyntheticMR]:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = MR_KINDS[i % len(MR_KINDS)] if i < len(MR_KINDS) else rng.choice(MR_KINDS)
        pkg, word = rng.choice(PACKAGES), rng.choice(WORDS)
        path, lines = {
            "sql": (
                f"{pkg}/{word}_db.py",
                [f"def find_{word}(conn, key):", f'    return conn.execute(f"{word} {{key}}")'],
            ),
            "docs": (f"docs/{pkg}_{word}.md", [f"# {word.title()}", f"How {pkg} handles {word}."]),
            "tests": (f"tests/test_{pkg}_{word}.py", [f"def test_{word}():", f"    assert {word}() is not None"]),
            "config": (f"{pkg}/{word}.yaml", ["timeout: 30", f"{word}_enabled: true"]),
        }[kind]
        snap = {
            "title": f"{kind} change in {pkg}",
            "description": f"Touches {word}.",
            "diff": diff_for({path: lines}),
            "head_sha": f"{i:040x}",
            "files": {},
        }
        other = rng.choice([k for k in MR_KINDS if k != kind])
        out.append(SyntheticMR(kind, path, snap, strategy_for(kind, path), strategy_for(other, path)))
    return out


def insert_synthetic(db: Database, mrs: Sequence[SyntheticMR], *, seed: int, start: datetime) -> None:
    """Posted reviews (mostly the good plan: two accepted findings; else the bad one: one rejected)
    and, for half the MRs, a shadow with the other plan whose findings nobody judged."""
    import random
    from datetime import timedelta

    rng = random.Random(seed)
    for i, mr in enumerate(mrs):
        posted_good = rng.random() < 0.75
        posted = mr.good if posted_good else mr.bad
        findings = (
            [
                FindingSpec(mr.path, 2, votes=[("gitlab:1", 1)]),
                FindingSpec(mr.path, 3, "code_quality", votes=[("gitlab:2", 1)]),
            ]
            if posted_good
            else [FindingSpec(mr.path, 2, "architecture", votes=[("gitlab:1", -1)])]
        )
        at = start + timedelta(hours=i)
        common = {"project": "acme/app", "mr_iid": i + 1, "head_sha": str(mr.snapshot["head_sha"])}
        parent = insert_review(
            db,
            ReviewSpec(posted, findings=findings, cost_tokens=1000),
            snapshot=mr.snapshot,
            created_at=at,
            **common,  # type: ignore[arg-type]
        )
        if rng.random() < 0.5:
            other = mr.bad if posted_good else mr.good
            insert_review(
                db,
                ReviewSpec(other, findings=[FindingSpec(mr.path, 40, "test_impact")]),
                snapshot=None,
                created_at=at + timedelta(minutes=1),
                parent_review_id=parent,
                **common,  # type: ignore[arg-type]
            )
