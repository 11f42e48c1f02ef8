"""Each slip rule on its fixtures (`reviewers/analyzers/slips/fixtures`): every line marked `# slip`
is reported by that rule, and nothing else in the file is reported by any slip rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewers.analyzers.pysyntax import parse_python
from reviewers.analyzers.slips import SLIP_RULES, all_slips

FIXTURES = Path(__file__).parents[3] / "reviewers" / "analyzers" / "slips" / "fixtures"
RULE_OF_FIXTURE = {
    "missing_comma": "slips:missing-comma",
    "logging_args": "slips:logging-args",
    "logging_loguru": "slips:logging-args",
    "logging_own": "slips:logging-args",
    "unraised": "slips:unraised-exception",
    "constant_comparison": "slips:constant-comparison",
    "mutated_default": "slips:mutated-default",
}


def test_every_fixture_is_named_and_every_rule_has_one() -> None:
    assert {p.stem for p in FIXTURES.glob("*.txt")} == set(RULE_OF_FIXTURE)
    assert set(RULE_OF_FIXTURE.values()) == set(SLIP_RULES)


@pytest.mark.parametrize("name", sorted(RULE_OF_FIXTURE))
def test_rule_reports_its_slips_and_not_its_near_misses(name: str) -> None:
    text = (FIXTURES / f"{name}.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    expected = {n for n, line in enumerate(lines, start=1) if "# slip" in line}
    found = all_slips(parse_python(text), lines)
    assert {(i.line, i.rule) for i in found} == {(n, RULE_OF_FIXTURE[name]) for n in expected}
    assert all(i.body and i.title for i in found)
