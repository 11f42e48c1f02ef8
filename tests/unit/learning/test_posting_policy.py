"""`learning.posting_policy` by hand, and the recorded judged history's held-out repositories."""

from __future__ import annotations

from learning.posting_policy import (
    Judged,
    evaluate,
    learned_policy,
    parse_judgements,
    record_policy,
    reward_of,
    split_by_repository,
)


def judged(repo: str, n: int, rule: str, verdict: str, path: str = "pkg/mod.py") -> Judged:
    return Judged(f"{repo}@{n:07x}", repo, path, rule, verdict)


def test_keys_parse_with_colons_in_the_rule_and_the_path() -> None:
    raw = {
        "o/r@abc123:src/a.py:12:ruff:F401": {"verdict": "right", "why": ""},
        "o/r@abc123:weird:name.py:3:tests:test-deleted": {"verdict": "wrong", "why": ""},
        "not a key": {"verdict": "right", "why": ""},
    }
    [a, b] = parse_judgements(raw)
    assert (a.mr, a.path, a.rule, a.family) == ("o/r@abc123", "src/a.py", "ruff:F401", "ruff:F")
    assert (b.path, b.rule, b.family) == ("weird:name.py", "tests:test-deleted", "tests:")


def test_reward_and_the_learned_decision_by_hand() -> None:
    good = [judged(f"o/g{i}", i, "ruff:F401", "right") for i in range(6)] + [judged("o/g9", 9, "ruff:F401", "wrong")]
    bad = [judged(f"o/b{i}", i, "tests:untested-new", "wrong") for i in range(6)]
    post = learned_policy(good + bad)
    assert post(judged("o/x", 1, "ruff:F401", "right")) and not post(judged("o/x", 1, "tests:untested-new", "right"))
    # today's rule holds a rule right in fewer than 70 % of >= 3 judgements on >= 2 commits, else posts
    today = record_policy(good + bad)
    assert today(judged("o/x", 1, "ruff:F401", "right")) and not today(judged("o/x", 1, "tests:untested-new", "wrong"))
    assert today(judged("o/x", 1, "never:seen", "wrong"))  # no record: it posts
    assert reward_of(good[0], True) == 1 and reward_of(bad[0], True) == -1 and reward_of(good[0], False) == -0.1
    result = evaluate(post, good + bad)
    assert (result.posted, result.right_posted, result.wrong_posted, result.right_listed) == (7, 6, 1, 0)


def test_the_split_keeps_every_repository_on_one_side() -> None:
    items = [judged(f"o/r{i}", i, "ruff:F401", "right") for i in range(200)]
    train, held = split_by_repository(items)
    assert not {f.repo for f in train} & {f.repo for f in held}
    assert 0.25 < len(held) / len(items) < 0.55


def test_on_held_out_repositories_the_learned_policy_posts_more_right_at_a_higher_share() -> None:
    """Issue 41 Done-when 2 on the recorded judgements (bench/history_judgements.json)."""
    from bench.history_policy import run

    result = run()
    learned = result["policies"]["learned (shrunk rule estimates)"]  # type: ignore[index]
    today = result["policies"]["today's rule (track record)"]  # type: ignore[index]
    assert learned["right_posted"] >= today["right_posted"]
    assert learned["right_share"] >= today["right_share"]
    assert result["learned_minus_today"]["lo"] > 0  # type: ignore[index]
