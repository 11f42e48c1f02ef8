"""Dataset build throughput: `learning.datasets.build_datasets` over 100,000 stored findings.

The history is written with COPY (the benchmark times the build, not the setup): posted GitLab
reviews, each with a snapshot (title, description, a small diff and the files at head) and a
strategy, plus shadow strategies for some of them (which makes DPO pairs), ten findings per
review, and thumbs on most posted findings (the labels). Throughput is stored findings per
second of `build_datasets`, which reads them, labels them, renders every prompt, and writes all
four dataset kinds to disk.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from agent.strategy import Strategy
from reviewers.fingerprint import make_fingerprint

FINDINGS = 100_000
FINDINGS_PER_REVIEW = 10
SHADOW_EVERY = 4  # one shadow strategy for every fourth posted review
VOTED_SHARE = 0.6  # share of posted findings somebody thumbed
PROJECTS = 40
HISTORY_DAYS = 120
REPEATS = 3

CATEGORIES = ("security", "code_quality", "test_impact", "architecture")
SEVERITIES = ("low", "medium", "high")
PLANS: tuple[dict[str, Any], ...] = (
    {"change_type": "feature", "plan": [{"reviewer": "security", "focus_paths": [], "step_budget": 6}]},
    {
        "change_type": "bugfix",
        "plan": [
            {"reviewer": "code_quality", "focus_paths": [], "step_budget": 4},
            {"reviewer": "test_impact", "focus_paths": [], "step_budget": 4},
        ],
    },
    {
        "change_type": "refactor",
        "plan": [
            {"reviewer": "architecture", "focus_paths": [], "step_budget": 5},
            {"reviewer": "security", "focus_paths": [], "step_budget": 3},
        ],
    },
)


def _snapshot(rng: random.Random, n: int) -> tuple[dict[str, Any], list[tuple[str, list[str]]]]:
    files = []
    for f in range(2):
        path = f"svc{n % 17}/mod_{n}_{f}.py"
        lines = [f"def handler_{n}_{f}(req):"] + [
            f"    value_{i} = req.args.get('k{i}', {rng.randint(0, 999)})" for i in range(8)
        ]
        lines.append(f'    return db.execute(f"SELECT * FROM t WHERE id = {{value_{rng.randint(0, 7)}}}")')
        files.append((path, lines))
    diff = []
    for path, lines in files:
        diff += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
        diff.append(f"@@ -0,0 +1,{len(lines)} @@")
        diff += ["+" + line for line in lines]
    snapshot = {
        "title": f"Handle request {n}",
        "description": f"Adds handler {n}.",
        "diff": "\n".join(diff) + "\n",
        "files": {path: "\n".join(lines) + "\n" for path, lines in files},
        "config_text": None,
        "head_sha": f"{n:040x}",
    }
    return snapshot, files


def populate(dsn: str, *, findings: int = FINDINGS, seed: int = 0) -> dict[str, int]:
    """Write the review history with COPY; returns how many rows of each table it wrote."""
    rng = random.Random(seed)
    n_reviews = findings // FINDINGS_PER_REVIEW
    start = datetime(2025, 1, 1, tzinfo=UTC)
    review_rows: list[tuple[Any, ...]] = []
    finding_rows: list[tuple[Any, ...]] = []
    feedback_rows: list[tuple[Any, ...]] = []
    posted: dict[int, tuple[dict[str, Any], list[tuple[str, list[str]]], datetime]] = {}
    review_id = 0
    finding_id = 0
    while review_id < n_reviews:
        review_id += 1
        parent = review_id - 1 if review_id % (SHADOW_EVERY + 1) == 0 and (review_id - 1) in posted else None
        if parent is None:
            snapshot, files = _snapshot(rng, review_id)
            created = start + timedelta(seconds=rng.randint(0, HISTORY_DAYS * 86400))
            posted[review_id] = (snapshot, files, created)
            mr_iid: int = review_id
            head: str | None = snapshot["head_sha"]
        else:
            snapshot, files, created = posted[parent]
            mr_iid, head = parent, snapshot["head_sha"]
        strategy = Strategy.model_validate(PLANS[rng.randrange(len(PLANS))])
        review_rows.append(
            (
                review_id,
                "gitlab",
                f"team/p{review_id % PROJECTS}" if parent is None else f"team/p{parent % PROJECTS}",
                mr_iid,
                snapshot["title"],
                head,
                "done",
                strategy.to_json(),
                strategy.render(),
                "model",
                parent is not None,
                parent,
                json.dumps(snapshot) if parent is None else None,
                rng.randint(500, 8000),
                created,
                created + timedelta(minutes=2),
            )
        )
        for k in range(FINDINGS_PER_REVIEW):
            finding_id += 1
            path, lines = files[k % len(files)]
            line = 2 + (k * 3 + rng.randint(0, 2)) % (len(lines) - 1)
            category = CATEGORIES[rng.randrange(len(CATEGORIES))]
            evidence = lines[line - 1]
            fingerprint = make_fingerprint(path=path, category=category, rule=f"bench:{k}", evidence=evidence)
            finding_rows.append(
                (
                    finding_id,
                    review_id,
                    fingerprint,
                    path,
                    line,
                    line,
                    category,
                    SEVERITIES[rng.randrange(len(SEVERITIES))],
                    f"{category} issue {k}",
                    "Explained in a sentence or two, as a reviewer would.",
                    evidence,
                    category,
                    f"bench:{k}",
                    "REAL",
                    "evidence found at the reported line, inside the change",
                )
            )
            if parent is None and rng.random() < VOTED_SHARE:
                value = 1 if rng.random() < 0.55 else -1
                feedback_rows.append((finding_id, f"gitlab:{rng.randint(1, 60)}", "emoji", value))
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY reviews (id, source, project, mr_iid, title, head_sha, status, strategy, strategy_text,"
            " strategy_source, is_shadow, parent_review_id, snapshot, cost_tokens, created_at, finished_at)"
            " FROM STDIN"
        ) as copy:
            for row in review_rows:
                copy.write_row(row)
        with cur.copy(
            "COPY findings (id, review_id, fingerprint, path, line, end_line, category, severity, title, body,"
            " evidence, reviewer, rule, verdict, verdict_reason) FROM STDIN"
        ) as copy:
            for row in finding_rows:
                copy.write_row(row)
        with cur.copy("COPY feedback (finding_id, user_key, source, value) FROM STDIN") as copy:
            for row in feedback_rows:
                copy.write_row(row)
        for table in ("reviews", "findings"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        cur.execute("ANALYZE reviews, findings, feedback")
    return {"reviews": len(review_rows), "findings": len(finding_rows), "feedback": len(feedback_rows)}


def run(dsn: str, *, findings: int = FINDINGS, repeats: int = REPEATS) -> dict[str, Any]:
    """Populate, then build the datasets `repeats` times; the median build gives the throughput."""
    from learning.datasets import build_datasets

    started = time.perf_counter()
    written = populate(dsn, findings=findings)
    populate_s = time.perf_counter() - started
    builds: list[float] = []
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="reviewloop-bench-datasets-") as tmp:
        for _ in range(repeats):
            started = time.perf_counter()
            card = build_datasets(dsn, Path(tmp))
            builds.append(time.perf_counter() - started)
            counts = card.counts
    build_s = statistics.median(builds)
    dataset_rows = sum(c["train"] + c["eval"] for c in counts.values())
    return {
        **written,
        "populate_s": populate_s,
        "copy_rows_per_s": sum(written.values()) / populate_s,
        "build_s": build_s,
        "build_runs_s": builds,
        "findings_per_s": written["findings"] / build_s,
        "reviews_per_s": written["reviews"] / build_s,
        "dataset_rows": dataset_rows,
        "dataset_counts": counts,
    }
