"""Votes keyed by kind of finding (issue 41): serving reads an analyzer's finding as the kind of defect
the learning environment plants and its teams vote on, so s1's team-votes line means the same in both."""

from __future__ import annotations

from agent.finding_kinds import DEFECT_KINDS, finding_kind, vote_key
from learning.envgen.plants import KINDS


def test_the_kinds_are_the_ones_the_environment_plants() -> None:
    assert sorted(DEFECT_KINDS) == sorted(KINDS)


def test_a_findings_kind_is_read_from_its_rule_and_title() -> None:
    assert finding_kind(rule="python:sql-interpolation", title="SQL statement built from request data") == (
        "sql-injection"
    )
    assert finding_kind(rule="bandit:B608", title="Possible injection vector") == "sql-injection"
    assert finding_kind(rule="ruff:E722", title="Do not use bare `except`") == "bare-except"
    assert finding_kind(rule="secrets:known-prefix", title="Hard-coded GitLab token") == "hardcoded-secret"
    # one rule, two kinds: the title tells yaml.load from pickle.loads
    assert finding_kind(rule="bandit:B506", title="Use of unsafe yaml load") == "unsafe-yaml"
    assert finding_kind(rule="python:unsafe-deserialization", title="pickle.loads of request data") == ("unsafe-pickle")
    assert finding_kind(rule="tests:untested-new", title="New code without tests: export") is None


def test_a_finding_of_no_known_kind_is_voted_on_under_its_rule() -> None:
    assert vote_key(rule="tests:untested-new", title="New code without tests") == "tests:untested-new"
    assert vote_key(rule="python:shell-interpolation", title="Command run through a shell") == "shell-injection"
