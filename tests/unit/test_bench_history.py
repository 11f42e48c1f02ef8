"""bench.history's pure parts: choosing code commits from a log, and the judged findings table."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from bench.history import (
    HELD_OUT,
    REPOSITORIES,
    SPENT_HELD_OUT,
    Commit,
    CommitResult,
    Judgement,
    Posted,
    code_commits,
    first_sight_record,
    from_json,
    held_back_by,
    interleave,
    judgement_key,
    load_judgements,
    main,
    parse_log,
    render,
    select_commits,
    to_json,
    track_record_json,
)

LOG = (
    "\x00" + "a" * 40 + "\t" + "p" * 40 + "\tfix the parser\n\n3\t1\tsrc/parse.py\n10\t0\tCHANGES.rst\n"
    "\x00" + "b" * 40 + "\t" + "p" * 40 + "\tdocs only\n\n5\t5\tdocs/index.rst\n"
    "\x00" + "c" * 40 + "\t" + "p" * 40 + " " + "q" * 40 + "\tmerge a reformat\n\n2000\t1900\tsrc/all.py\n"
    "\x00" + "d" * 40 + "\t" + "p" * 40 + "\tmove a module\n\n4\t2\tsrc/{old => new}/mod.py\n-\t-\tlogo.png\n"
    "\x00" + "e" * 40 + "\t\troot commit\n\n7\t0\tsrc/first.py\n"
)


def test_the_log_is_parsed_with_renames_and_binary_files() -> None:
    parsed = parse_log(LOG)
    assert [(sha[0], parents) for sha, parents, _, _ in parsed] == [("a", 1), ("b", 1), ("c", 2), ("d", 1), ("e", 0)]
    assert parsed[3][3] == {"src/new/mod.py": 6, "logo.png": 0}


def test_code_commits_are_the_newest_with_python_lines_and_a_parent() -> None:
    chosen, skipped = select_commits(parse_log(LOG), per_repo=10, max_lines=1500)
    assert [(c.sha[0], c.lines, c.subject) for c in chosen] == [("a", 4, "fix the parser"), ("d", 6, "move a module")]
    assert skipped == 1  # the reformat, larger than max_lines
    first_only, _ = select_commits(parse_log(LOG), per_repo=1)
    assert [c.sha[0] for c in first_only] == ["a"]


def _root_commit(repo: Path) -> Callable[..., str]:
    """A git repository at `repo` with one commit adding `a.py`, and a `git` that runs there."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e.invalid"}

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=60)
        return done.stdout.decode().strip()

    git("init", "-q", "-b", "main")
    (repo / "a.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-q", "-m", "root")
    return git


def test_code_commits_of_a_real_repository_follow_the_first_parent(tmp_path: Path) -> None:
    git = _root_commit(tmp_path)
    git("checkout", "-q", "-b", "feature")
    (tmp_path / "b.py").write_text("y = 2\nz = 3\n")
    git("add", "-A")
    git("commit", "-q", "-m", "feature work")
    git("checkout", "-q", "main")
    (tmp_path / "README").write_text("hi\n")
    git("add", "-A")
    git("commit", "-q", "-m", "readme")
    git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    chosen, _ = code_commits(tmp_path, per_repo=5)
    # the merge carries the branch's Python change; the branch commit is not first-parent; the
    # readme commit changes no Python; the root has no base
    assert [c.subject for c in chosen] == ["merge feature"] and chosen[0].lines == 2


def test_commits_are_taken_round_robin_so_a_cut_short_run_covers_every_repository() -> None:
    a = [Commit(f"a{i}", "", 1) for i in range(3)]
    b = [Commit("b0", "", 1)]
    order = [(repo, c.sha) for repo, _, c in interleave([("r/a", Path("x"), a), ("r/b", Path("y"), b)])]
    assert order == [("r/a", "a0"), ("r/b", "b0"), ("r/a", "a1"), ("r/a", "a2")]


def _results() -> list[CommitResult]:
    posted = [
        Posted("o/lib", "1" * 40, "tests:test-deleted", "medium", "tests/t.py", 9, "Test gone", "def `x`|y"),
        Posted("o/lib", "1" * 40, "ruff:B006", "medium", "lib/a.py", 3, "Mutable default", "def f(x=[]):"),
    ]
    return [
        CommitResult("o/lib", "1" * 40, "change", 600, 1.0, posted),
        CommitResult("o/lib", "2" * 40, "older", 400, 1.0),
        CommitResult("o/other", "3" * 40, "quiet", 1000, 1.0),
    ]


def test_the_table_joins_judgements_and_counts_what_is_right() -> None:
    results = _results()
    judgements = {judgement_key(results[0].posted[1]): Judgement("right", "a shared list default")}
    text = render(results, judgements, skipped={"o/lib": 2})
    assert "| o/lib | 2 (+2 over 1500 lines skipped) | 2222222222 … 1111111111 | 1,000 | 2 | 2.00 | 2 | 2.00 |" in text
    assert "| o/other | 1 | 3333333333 … 3333333333 | 1,000 | 0 | 0.00 | 0 | 0.00 |" in text
    assert "| **all** | 3 | | 2,000 | 2 | **1.00** (target ≤ 1) | 2 | 1.00 |" in text
    assert "right 1, debatable 0, wrong 0, not yet judged 1. Right: **50%**" in text
    assert "| right | a shared list default |" in text
    assert "| — | not judged |" in text
    assert "def 'x'¦y" in text  # table and code delimiters in evidence cannot break the row


def test_results_survive_the_json_round_trip() -> None:
    results = _results()
    again, skipped = from_json(to_json(results, {"o/lib": 2}))
    assert again == results and skipped == {"o/lib": 2}


def test_a_judgement_key_is_stable_across_reruns() -> None:
    p = _results()[0].posted[0]
    assert judgement_key(p) == "o/lib@111111111111:tests/t.py:9:tests:test-deleted"


def test_the_held_out_repositories_are_reviewed_apart_from_the_tuned_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spent = {repo for held_out in SPENT_HELD_OUT for repo in held_out}
    assert not set(HELD_OUT) & (set(REPOSITORIES) | spent) and not set(REPOSITORIES) & spent
    assert main(["--mirrors", str(tmp_path), "--held-out", "--judgements", str(tmp_path / "none.json")]) == 1
    missing = [line.split()[1].rstrip(":") for line in capsys.readouterr().err.splitlines() if "no mirror" in line]
    assert missing == list(HELD_OUT)


def test_a_mirror_whose_history_cannot_be_read_is_left_out_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a snapshot missing objects makes `git log --numstat` fail; the set goes on without that repository
    (tmp_path / "o+broken" / "repo").mkdir(parents=True)
    assert main(["--mirrors", str(tmp_path), "--repos", "o/broken", "--judgements", str(tmp_path / "none.json")]) == 1
    err = capsys.readouterr().err
    assert "o/broken: its history cannot be read (" in err and "not a git repository" in err.lower()


def test_a_credential_finding_s_value_is_not_republished_in_the_report() -> None:
    from bench.history import shown_evidence

    url = "db = mssql+pyodbc://scott:tiger^5HHH@mssql2022:1433/test"
    assert shown_evidence("secrets:url-credentials", url) == "db = mssql+pyodbc://scott:***@mssql2022:1433/test"
    assert shown_evidence("python:hardcoded-credential", "secret_key = 'predictable-key'") == "(value withheld)"
    assert shown_evidence("ruff:F401", "import os") == "import os"


def test_the_track_record_counts_held_out_judgements_at_first_sight_only() -> None:
    spent, tuned = SPENT_HELD_OUT[0][0], REPOSITORIES[0]
    judgements = {
        f"{spent}@aaaaaaaaaaaa:src/a.py:3:ruff:F401": Judgement("right", "unused"),
        f"{spent}@bbbbbbbbbbbb:tests/t.py:9:tests:test-deleted": Judgement("wrong", "moved"),
        f"{spent}@cccccccccccc:tests/u.py:1:tests:test-deleted": Judgement("debatable", "folded"),
        f"{tuned}@dddddddddddd:tests/v.py:2:tests:test-deleted": Judgement("right", "tuned on, left out"),
    }
    assert first_sight_record(judgements) == {
        "ruff:F401": {"right": 1, "debatable": 0, "wrong": 0, "commits": 1},
        "tests:test-deleted": {"right": 0, "debatable": 1, "wrong": 1, "commits": 2},
    }


def test_the_track_record_is_a_rules_latest_judgements() -> None:
    from bench.history import RECORD_WINDOW

    spent = SPENT_HELD_OUT[0][0]
    old = {f"{spent}@{n:012x}:a.py:1:ruff:E722": Judgement("wrong", "before the fix") for n in range(RECORD_WINDOW)}
    new = {f"{spent}@{n + RECORD_WINDOW:012x}:a.py:1:ruff:E722": Judgement("right", "after") for n in range(3)}
    assert first_sight_record({**old, **new})["ruff:E722"] == {
        "right": 3, "debatable": 0, "wrong": RECORD_WINDOW - 3, "commits": RECORD_WINDOW
    }  # fmt: skip


def test_the_shipped_track_record_is_generated_from_the_judgements() -> None:
    from agent.verdicts.track_record import TRACK_RECORD

    assert TRACK_RECORD.read_text(encoding="utf-8") == track_record_json(load_judgements()), (
        "agent/verdicts/track_record.json is out of date: python -m bench.history --track-record"
    )


def test_what_posting_all_would_have_posted_is_paired_with_what_was_posted_on_the_same_set() -> None:
    results = _results()
    tier = Posted("o/other", "3" * 40, "python:weak-hash", "high", "lib/h.py", 5, "Weak hash", "md5(pw)")
    record = Posted("o/other", "3" * 40, "ruff:BLE001", "low", "lib/h.py", 9, "Blind except", "except Exception:")
    results[2].tier_held.append(tier)
    results[2].held.append(record)
    judgements = {
        judgement_key(results[0].posted[1]): Judgement("right", "a shared list default"),
        judgement_key(results[0].posted[0]): Judgement("wrong", "moved"),
        judgement_key(tier): Judgement("wrong", "a checksum, not a password"),
    }
    text = render(results, judgements)
    assert "| o/other | 1 | 3333333333 … 3333333333 | 1,000 | 0 | 0.00 | 1 | 1.00 |" in text
    assert "| **all** | 3 | | 2,000 | 2 | **1.00** (target ≤ 1) | 3 | 1.50 |" in text
    assert "Right: **50%** of posted" in text
    assert 'With posting="all" (posted, and listed by the posting tier): 3 — right 1, debatable 0, wrong 2' in text
    assert "right **33%**" in text
    assert "Listed by the posting tier" in text and "a checksum, not a password" in text
    # held back by the record is counted apart and never in either figure
    assert "Held back by a rule's held-out record (listed for a person, not posted): 1 — right 0" in text
    again, _ = from_json(to_json(results, {}))
    assert again == results


def test_findings_sent_to_a_person_are_counted_apart_from_the_posted_ones() -> None:
    results = _results()
    results[0].listed = 4
    assert "Listed for a person in the summary instead of posted (NEEDS_HUMAN_REVIEW): 4." in render(results, {})


def test_a_finding_the_tier_listed_is_not_counted_as_held_by_the_record_when_its_reason_quotes_a_record() -> None:
    """The tier's reason for a rule judged too seldom to be held ("right in 0 of 2 findings judged on
    open-source history") quotes the record's words; it is still the tier that listed it."""
    from agent.verdicts.feedback import PeopleVotes
    from agent.verdicts.posting import unearned_voice
    from agent.verdicts.track_record import HELD_BY_RECORD, Record, unproven_rule
    from reviewers.kernel.contracts import Finding

    finding = Finding(
        path="pkg/__init__.py", line=6, end_line=6, category="code_quality", severity="high",
        title="Invalid object in __all__", body="", evidence="__all__ += other.__all__", reviewer="code_quality",
        rule="ruff:PLE0605", confidence="high", fingerprint="f",
    )  # fmt: skip
    seldom = {"ruff:PLE0605": Record(right=0, debatable=0, wrong=2, commits=2)}
    poor = {"ruff:PLE0605": Record(right=0, debatable=1, wrong=5, commits=4)}
    assert unproven_rule(finding, PeopleVotes(), seldom) is None
    tier_reason = unearned_voice(finding, PeopleVotes(), seldom)
    record_reason = unproven_rule(finding, PeopleVotes(), poor)
    assert tier_reason is not None and record_reason is not None
    assert HELD_BY_RECORD in tier_reason  # the trap: the tier's reason carries the record's marker
    assert held_back_by(tier_reason) == "tier"
    assert held_back_by(record_reason) == "record"
    assert held_back_by("ruff:X is a low-confidence rule: listed for a human in the summary") is None


def test_the_repository_bootstrap_is_wide_when_one_repository_makes_the_share() -> None:
    from bench.history import repository_interval

    def commit(repo: str, n: int, verdict: Literal["right", "wrong"]) -> tuple[CommitResult, dict[str, Judgement]]:
        posts = [
            Posted(repo, f"{n:040d}", "ruff:F401", "low", "lib/a.py", line, "Unused", "import x") for line in range(10)
        ]
        return CommitResult(repo, f"{n:040d}", "s", 100, 0.1, posted=posts), {
            judgement_key(p): Judgement(verdict, "why") for p in posts
        }

    right, jr = commit("o/good", 1, "right")
    wrong, jw = commit("o/bad", 2, "wrong")
    quiet = CommitResult("o/quiet", "3" * 40, "s", 100, 0.1)
    judgements = {**jr, **jw}
    low, high = repository_interval([right, wrong, quiet], judgements) or (None, None)
    # 10 of 20 posts right; Wilson's interval would be 30-70 %, but the posts are two repositories' habits
    assert low is not None and high is not None and low <= 0.1 and high >= 0.9
    assert repository_interval([right, quiet], jr) is None  # one repository posted: no interval to draw
    text = render([right, wrong, quiet], judgements)
    assert "repository bootstrap 95 %:" in text


def test_a_snapshot_missing_a_blob_is_read_commit_by_commit(tmp_path: Path) -> None:
    """The fetch tool leaves a large repository's largest objects out: `git log --numstat` then fails
    as a whole, but every commit that does not need the missing blob is still chosen."""
    git = _root_commit(tmp_path)
    (tmp_path / "data.txt").write_text("large data\n" * 50)
    (tmp_path / "a.py").write_text("x = 2\n")
    git("add", "-A")
    git("commit", "-q", "-m", "add the data")
    git("checkout", "-q", "-b", "side")
    (tmp_path / "data.txt").write_text("other large data\n" * 50)
    git("commit", "-qam", "change the data")
    git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "-m", "merge the data", "side")
    for n in range(3):
        (tmp_path / f"m{n}.py").write_text(f"y = {n}\n")
        git("add", "-A")
        git("commit", "-q", "-m", f"code {n}")
    blob = git("rev-parse", "HEAD:data.txt")
    (tmp_path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # what a partial snapshot lacks
    for broken in (("--numstat",), ("--first-parent", "--diff-merges=first-parent")):
        with pytest.raises(subprocess.CalledProcessError):
            git("log", *broken, "HEAD")
    chosen, too_large = code_commits(tmp_path, per_repo=10)
    # the merge needs the missing blob (passed over); the commit that first added the data does not
    assert [c.subject for c in chosen] == ["code 2", "code 1", "code 0", "add the data"] and too_large == 0


def test_items_listed_for_a_person_are_kept_one_by_one_and_judged_against_half() -> None:
    results = _results()
    shown = [
        Posted("o/lib", "1" * 40, "tests:untested-new", "low", f"src/m{i}.py", i, "New code without tests", "def f():")
        for i in range(1, 5)
    ]
    results[0].shown = shown
    judgements = {
        judgement_key(shown[0]): Judgement("right", "a helper nobody tests"),
        judgement_key(shown[1]): Judgement("debatable", "covered through its caller"),
        judgement_key(shown[2]): Judgement("wrong", "tested by URL"),
    }
    text = render(results, judgements)
    assert "Listed one by one for a person: 4 — right 1, debatable 1, wrong 1, not yet judged 1." in text
    assert "Right or debatable: **67%** of judged (target ≥ 50%)." in text
    again, _ = from_json(to_json(results, {}))
    assert again[0].shown == shown


def test_a_judgement_of_a_finding_no_longer_made_leaves_the_track_record() -> None:
    spent = SPENT_HELD_OUT[0][0]
    judgements = {
        f"{spent}@{'a' * 12}:m.py:{i}:ruff:F821": Judgement(
            "wrong", "a notebook's name", gone_at="c0ffee" if i < 3 else ""
        )
        for i in range(1, 5)
    }
    judgements[f"{spent}@{'b' * 12}:m.py:9:ruff:F821"] = Judgement("right", "a missing import")
    assert first_sight_record(judgements)["ruff:F821"] == {"right": 1, "debatable": 0, "wrong": 2, "commits": 2}
