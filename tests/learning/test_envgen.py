"""`reviewloop dev make-env`: merge requests from real installed packages, split by package, with
labels that sit on the planted lines at head and that the reviewers' own analyzers confirm."""

from __future__ import annotations

import ast
import importlib.util
import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.diff import parse_unified_diff
from agent.strategy import Strategy
from api.cli import app
from learning.envgen.edits import BENIGN_EDITS, add_docstring, add_return_hint, rename_local, reorder_imports
from learning.envgen.plants import DECOYS, DEFECTS
from learning.envgen.profile import TeamProfile
from learning.replay import ReplayCase, ReplayEnv, read_jsonl_cases
from learning.replay_reward import match_labeled
from reviewers.kernel.contracts import PlanItem
from reviewers.kernel.errors import TrainingError

runner = CliRunner()
# Small pure-Python packages the project itself depends on (so they are installed wherever tests run).
SOURCE_PACKAGES = ("click", "yaml", "jinja2", "httpx", "dateutil", "h11")


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of links to real installed packages: released code, read offline."""
    root = tmp_path_factory.mktemp("source")
    for name in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            (root / name).symlink_to(Path(next(iter(spec.submodule_search_locations))), target_is_directory=True)
    assert len(list(root.iterdir())) >= 4, "the project's dependencies should provide these packages"
    return root


@pytest.fixture(scope="module")
def env_file(source_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("env") / "env.jsonl"
    result = runner.invoke(
        app, ["dev", "make-env", "--source", str(source_dir), "--out", str(out), "--n", "8", "--seed", "3"]
    )
    assert result.exit_code == 0, result.stderr
    assert "held-out packages:" in result.stdout
    return out


def test_train_and_held_out_come_from_different_packages(env_file: Path) -> None:
    cases = read_jsonl_cases(env_file)
    by_split = {s: [c for c in cases if c.split == s] for s in ("train", "eval")}
    assert by_split["train"] and by_split["eval"]
    for case in cases:
        assert case.package and all(path.split("/")[0] == case.package for path in case.files)
        assert 10 <= len(case.files) <= 16
    train_files = {p for c in by_split["train"] for p in c.files}
    eval_files = {p for c in by_split["eval"] for p in c.files}
    assert not train_files & eval_files
    assert not {c.package for c in by_split["train"]} & {c.package for c in by_split["eval"]}


def test_each_label_sits_on_its_planted_line_at_head(env_file: Path) -> None:
    sinks = {("defect", t.kind): t.sink for t in DEFECTS} | {("decoy", t.kind): t.sink for t in DECOYS}
    cases = read_jsonl_cases(env_file)
    labels = [f for c in cases for f in c.findings]
    assert any(not f.kind.startswith("decoy:") for f in labels) and any(f.kind.startswith("decoy:") for f in labels)
    for case in cases:
        added = {(f.path, n) for f in parse_unified_diff(case.diff) for n in f.added_lines()}
        for label in case.findings:
            role, kind = ("decoy", label.kind[6:]) if label.kind.startswith("decoy:") else ("defect", label.kind)
            head_line = case.files[label.path].splitlines()[label.line - 1]
            assert sinks[(role, kind)] in head_line, (case.case_id, label)
            assert (label.path, label.line) in added, "a label must be on a line the change added"
            if role == "decoy":
                assert label.label == "rejected"
        for text in case.files.values():
            ast.parse(text)  # every edited file is still Python
        assert case.review_budget is not None and case.review_budget < len(case.files)


@pytest.mark.slow
def test_every_defect_and_every_decoy_is_found_by_a_one_step_plan(env_file: Path) -> None:
    """No defect any plan cannot find, and every decoy is a false alarm the analyzers DO raise (issue 24):
    one visit of its file by the reviewer of its category, within the case's own budget, reports it."""
    env = ReplayEnv()
    cases = read_jsonl_cases(env_file)
    assert any(f.kind.startswith("decoy:") for c in cases for f in c.findings)
    for case in cases:
        for label in case.findings:
            assert not label.path.split("/")[-1].startswith("test_")
            # security is in every plan of a code change (serving's safety net), so it is planned here too
            reviewers = ["security"] + (["code_quality"] if label.category == "code_quality" else [])
            z = Strategy(
                change_type="feature",
                plan=[PlanItem(reviewer=r, focus_paths=[label.path], step_budget=1) for r in reviewers],
            )
            execution = env.execute(case, z)
            result, labels = match_labeled(execution.findings, case)
            assert label in [labels[id(e)] for _, e in result.true_positives], (case.case_id, label)


def test_the_review_budget_is_shared_by_all_reviewers(env_file: Path) -> None:
    case = read_jsonl_cases(env_file)[0].model_copy(update={"review_budget": 3})
    paths = sorted(case.files)
    z = Strategy(
        change_type="feature",
        plan=[PlanItem(reviewer=r, focus_paths=paths, step_budget=20) for r in ("security", "code_quality")],
    )
    execution = ReplayEnv().execute(case, z)
    assert execution.n_steps == 3
    assert len(execution.results) == 1  # the first reviewer spent the whole budget


SAMPLE = '''"""A module."""
import sys
import os


def total(items):
    running = 0
    for item in items:
        running = running + item
    return running


def report(values):
    print(total(values), file=sys.stderr)
'''


def test_benign_edits_keep_the_code_equivalent() -> None:
    rng = random.Random(0)
    renamed = rename_local(SAMPLE, rng)
    assert renamed is not None

    def names(text: str) -> set[str]:
        return {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}

    (gone,), (added,) = names(SAMPLE) - names(renamed), names(renamed) - names(SAMPLE)
    assert gone in ("running", "item") and added.endswith("_" + gone)
    documented = add_docstring(SAMPLE, rng)
    assert documented is not None
    fns = [n for n in ast.parse(documented).body if isinstance(n, ast.FunctionDef)]
    assert sum(ast.get_docstring(f) is not None for f in fns) == 1
    hinted = add_return_hint(SAMPLE, rng)
    assert hinted is not None and "def report(values) -> None:" in hinted
    reordered = reorder_imports(SAMPLE, rng)
    assert reordered is not None and reordered.index("import os") < reordered.index("import sys")
    for edit in BENIGN_EDITS.values():
        out = edit(SAMPLE, random.Random(1))
        assert out is None or ast.parse(out)


def test_the_profile_decides_labels_and_votes() -> None:
    team = TeamProfile(reject_categories=["code_quality"], reject_kinds=["unsafe-yaml"], reject_paths=["*/tests/*"],
                       accept_categories=["security"])  # fmt: skip
    assert team.vote(path="pkg/db.py", category="security", kind="sql-injection") == "accepted"
    assert team.vote(path="pkg/db.py", category="security", kind="unsafe-yaml") == "rejected"
    assert team.vote(path="pkg/tests/test_db.py", category="security", kind="sql-injection") == "rejected"
    assert team.vote(path="pkg/db.py", category="code_quality", kind="bare-except") == "rejected"
    assert team.vote(path="pkg/db.py", category="architecture", kind=None) is None
    assert TeamProfile.sample(5) == TeamProfile.sample(5)


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("reviewloop: ") and "Traceback" not in stderr
    return lines[0]


def test_a_source_without_python_files_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# nothing to review\n")
    result = runner.invoke(app, ["dev", "make-env", "--source", str(tmp_path), "--out", str(tmp_path / "e.jsonl")])
    assert result.exit_code == 1
    assert "has no Python files" in one_line(result.stderr)


def test_a_profile_with_an_unknown_category_is_one_line(source_dir: Path, tmp_path: Path) -> None:
    profile = tmp_path / "team.json"
    profile.write_text(json.dumps({"accept_categories": ["security", "style"]}))
    result = runner.invoke(
        app,
        ["dev", "make-env", "--source", str(source_dir), "--out", str(tmp_path / "e.jsonl"), "--profile", str(profile)],
    )
    assert result.exit_code == 1
    assert "unknown categories style" in one_line(result.stderr)


def test_a_profile_with_an_unknown_kind_is_one_line(source_dir: Path, tmp_path: Path) -> None:
    profile = tmp_path / "team.json"
    profile.write_text(json.dumps({"reject_kinds": ["sql-injection", "tabs-vs-spaces"]}))
    result = runner.invoke(
        app,
        ["dev", "make-env", "--source", str(source_dir), "--out", str(tmp_path / "e.jsonl"), "--profile", str(profile)],
    )
    assert result.exit_code == 1
    assert "unknown kinds tabs-vs-spaces" in one_line(result.stderr)


def _project(root: Path, parts: dict[str, str]) -> Path:
    """One package whose sub-packages hold real released modules (copied from installed packages)."""
    project = root / "myproject"
    project.mkdir()
    (project / "__init__.py").write_text('"""My project."""\n')
    for sub, package in parts.items():
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        (project / sub).mkdir()
        (project / sub / "__init__.py").write_text("")
        for module in sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py")):
            (project / sub / module.name).write_text(module.read_text(encoding="utf-8"), encoding="utf-8")
    return project


def test_make_env_on_one_package_directory_splits_it_by_sub_package(tmp_path: Path) -> None:
    project = _project(tmp_path, {"cli": "click", "wire": "h11", "templates": "jinja2"})
    out = tmp_path / "own.jsonl"
    args = ["dev", "make-env", "--source", str(project), "--out", str(out), "--n", "6", "--min-files", "6"]
    result = runner.invoke(app, [*args, "--max-files", "8", "--profiles", "3"])
    assert result.exit_code == 0, result.stderr
    cases = read_jsonl_cases(out)
    by_split = {s: {c.package for c in cases if c.split == s} for s in ("train", "eval")}
    assert by_split["train"] and by_split["eval"] and not by_split["train"] & by_split["eval"]
    assert by_split["train"] | by_split["eval"] <= {"myproject.cli", "myproject.wire", "myproject.templates"}
    for case in cases:
        part = (case.package or "").split(".")[1]
        assert all(path.startswith(f"myproject/{part}/") for path in case.files)
    assert len(json.loads(out.with_suffix(".profiles.json").read_text())) == 3


def test_one_package_that_does_not_split_is_one_line(tmp_path: Path) -> None:
    project = _project(tmp_path, {"cli": "click"})
    result = runner.invoke(app, ["dev", "make-env", "--source", str(project), "--out", str(tmp_path / "e.jsonl")])
    assert result.exit_code == 1
    assert "holds one package (myproject) that does not split into two parts" in one_line(result.stderr)


def test_an_env_file_from_an_older_make_env_is_one_line(env_file: Path, tmp_path: Path) -> None:
    old = json.loads(env_file.read_text().splitlines()[0])
    old.pop("envgen_version")
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(TrainingError, match=r"old.jsonl:1: written by an older make-env \(version 1, this is 2\)"):
        read_jsonl_cases(tmp_path / "old.jsonl")


def test_each_merge_request_is_drawn_with_a_team_whose_votes_s1_shows(env_file: Path) -> None:
    cases = read_jsonl_cases(env_file)
    assert len({c.team for c in cases}) >= 2
    profiles = {
        p["name"]: TeamProfile.model_validate(p) for p in json.loads(env_file.with_suffix(".profiles.json").read_text())
    }
    assert len(profiles) == 10
    for case in cases:
        team = profiles[case.team or ""]
        s1 = ReplayEnv().reset(case)
        for kind in team.reject_kinds:
            up, down = case.rule_votes[kind]
            assert down > up and f"{kind} +{up}/-{down}" in s1
        for label in case.findings:
            if not label.kind.startswith("decoy:"):
                assert label.label == (
                    team.vote(path=label.path, category=label.category, kind=label.kind) or "accepted"
                )


def test_cases_read_back_as_replay_cases(env_file: Path) -> None:
    first = json.loads(env_file.read_text().splitlines()[0])
    case = ReplayCase.model_validate(first)
    s1 = ReplayEnv().reset(case)  # rendered by serving's renderer, with the team's votes and the budget
    assert f"title: {case.title}" in s1 and case.split == "train" and case.s1 is None
    assert f"review budget: {case.review_budget} reviewer steps" in s1 and "team votes by kind" in s1
    # the description names no changed file (issue 24: the old one listed every planted helper)
    assert not any(path in case.description for path in case.files)


@pytest.mark.slow
def test_the_profile_votes_through_the_feedback_path(env_file: Path, db_dsn: str) -> None:
    """A synthesised MR reviewed by the real pipeline into Postgres; the profile's votes land in the
    feedback table and come out of the dataset builder's reader as the labels of those findings."""
    from agent.context import ReviewRequest
    from agent.pipeline import run_review
    from agent.runtime import Runtime
    from agent.session import prepare_database
    from agent.store.db import open_pool
    from learning.envgen.votes import cast_profile_votes
    from learning.episodes import episodes_from_rows, read_review_rows
    from learning.feedback_labels import FeedbackRewardConfig

    case = next(c for c in read_jsonl_cases(env_file) if any(not f.kind.startswith("decoy:") for f in c.findings))
    team = TeamProfile(accept_categories=["security"], reject_categories=["code_quality"])
    prepare_database(db_dsn)  # the review graph's checkpoint tables
    with open_pool(db_dsn, max_size=2) as pool:
        request = ReviewRequest(
            source="diff", project=f"envgen/{case.package}", mr_iid=1, title=case.title,
            description=case.description, diff_text=case.diff, files=case.files,
        )  # fmt: skip
        outcome = run_review(Runtime(pool=pool, llm=None), request, dsn=db_dsn)
        posted = [v.finding for v in outcome.verified if v.verdict == "REAL"]
        votes = cast_profile_votes(pool, outcome.review_id, team)
        rows = read_review_rows(pool, since=None)
    assert posted and votes.accepted + votes.rejected + votes.abstained == len(posted)
    [episode] = [e for e in episodes_from_rows(rows, config=FeedbackRewardConfig()).episodes if not e.is_shadow]
    labels = {(f.path, f.line, f.category): f.label for f in episode.findings}
    for finding in posted:
        expected = {"security": "accepted", "code_quality": "rejected"}.get(finding.category, "unknown")
        assert labels[(finding.path, finding.line, finding.category)] == expected
