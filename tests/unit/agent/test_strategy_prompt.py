"""One strategy prompt (issue 24): serving, training, the gate and RL render s1 with one function, so
for the same merge request and history they give the same bytes; the excerpt covers every file."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from agent.diff import parse_unified_diff
from agent.graph import serving_s1
from agent.repo_config import parse_repo_config
from agent.strategy_prompt import added_lines_excerpt, render_s1
from agent.workspaces.snapshot import SnapshotWorkspace
from learning.episodes import ReviewRecord, ReviewRows, episodes_from_rows, s1_for_snapshot
from learning.feedback_labels import FeedbackRewardConfig
from learning.replay import ReplayCase, ReplayEnv
from learning.strata.synthetic import file_diff
from reviewers.kernel.contracts import ReviewContext

CONFIG_TEXT = 'reviewers = ["security", "code_quality"]\nmin_severity = "medium"\nreview_budget = 5\n'
HISTORY = {"app/db.py": 0.25, "app/util.py": 1.0}
VOTES = {"sql-injection": (4, 0), "ruff:S110": (0, 3)}  # keyed by kind (`agent.finding_kinds.vote_key`)


def _lines(name: str, n: int, risky_at: int | None = None) -> list[str]:
    body = [f"def {name}_{i}(value):" if i % 2 == 0 else f"    return value + {i}" for i in range(n)]
    if risky_at is not None:
        body[risky_at] = "    cursor.execute(f\"SELECT * FROM t WHERE id = '{value}'\")"
    return body


def big_mr() -> tuple[str, dict[str, str]]:
    """Twelve files: one large one first (it would crowd the others out of a first-hunk overview)."""
    changes = [("app/big.py", _lines("big", 80))]
    changes += [(f"app/mod{i}.py", _lines(f"m{i}", 6)) for i in range(10)]
    changes.append(("app/db.py", _lines("db", 30, risky_at=25)))
    diff = "".join(file_diff(path, [], lines) for path, lines in changes)
    return diff, {path: "\n".join(lines) + "\n" for path, lines in changes}


class ProjectHistory:
    """Serving's history ports as the production runtime answers them from Postgres."""

    def history(self, context: ReviewContext) -> Mapping[str, float]:
        return HISTORY

    def rule_votes(self, context: ReviewContext) -> Mapping[str, tuple[int, int]]:
        return VOTES


def test_training_the_gate_and_serving_render_the_same_prompt() -> None:
    diff, files = big_mr()
    title, description = "Add lookups", "A few helpers."
    changes = parse_unified_diff(diff)
    context = ReviewContext(
        title=title,
        description=description,
        files=changes,
        workspace=SnapshotWorkspace(files),
        config=parse_repo_config(CONFIG_TEXT),
    )
    served = serving_s1(ProjectHistory(), context)
    case = ReplayCase(
        case_id="mr-1",
        title=title,
        description=description,
        diff=diff,
        files=files,
        config_text=CONFIG_TEXT,
        history=HISTORY,
        rule_votes=VOTES,
    )
    gate_and_rl = ReplayEnv().reset(case)  # what learning/gate.py and learning/strata prompt with
    training = s1_for_snapshot(case.snapshot())  # what the SFT/DPO datasets are cut from
    review = ReviewRecord(
        id=1,
        project="p",
        mr_iid=1,
        head_sha=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        is_shadow=False,
        parent_review_id=None,
        strategy={"change_type": "feature", "plan": []},
        snapshot=case.snapshot(),
        cost_tokens=0,
    )
    built = episodes_from_rows(ReviewRows([review], [], []), config=FeedbackRewardConfig())
    assert served == gate_and_rl == training == built.episodes[0].prompt_s1
    assert "app/db.py 25%" in served and "sql-injection +4/-0" in served and "min severity medium" in served
    # the repository's review budget, which serving's plan posting spends (agent.plan_posting)
    assert "review budget: 5 reviewer steps in all, one file per step" in served
    # a serving review stores its s1 and training takes it as it is
    assert s1_for_snapshot({**case.snapshot(), "s1": served}) == served


def test_the_excerpt_covers_every_file_within_sixty_lines_risky_lines_first() -> None:
    diff, _ = big_mr()
    changes = parse_unified_diff(diff)
    excerpt = added_lines_excerpt(changes).splitlines()
    assert len(excerpt) == 60
    for change in changes:
        assert any(line.startswith(f"modified {change.path} ") for line in excerpt)
    # the SQL line of db.py (its 26th added line) is shown; round-robin left big.py no more than its share
    assert "26: +    cursor.execute(f\"SELECT * FROM t WHERE id = '{value}'\")" in excerpt
    big = excerpt.index("modified app/big.py [python] +80 -0")
    assert excerpt[big + 1 : big + 5] == [
        "1: +def big_0(value):",
        "2: +    return value + 1",
        "3: +def big_2(value):",
        "4: +    return value + 3",
    ]
    assert not excerpt[big + 5].startswith("5: ")
    # more files than lines: a note counts the rest
    assert added_lines_excerpt(changes, max_lines=5).splitlines()[-1] == "… 8 more files not shown (+72 -0)"


def test_no_prompt_lists_what_the_files_are_for() -> None:
    diff, _ = big_mr()
    s1 = render_s1(title="t", description="", files=parse_unified_diff(diff), review_budget=4)
    assert "description: (none)" in s1 and "review budget: 4 reviewer steps in all, one file per step" in s1
