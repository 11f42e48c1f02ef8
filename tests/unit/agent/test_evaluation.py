from agent.evaluation import ExpectedFinding, NegativeLine, match_findings, score_matches
from reviewers.kernel.contracts import Finding


def f(path: str, line: int, category: str = "security") -> Finding:
    return Finding(
        path=path,
        line=line,
        end_line=line,
        category=category,
        severity="high",  # type: ignore[arg-type]
        title="t",
        body="b",
        reviewer=category,
    )  # type: ignore[arg-type]


def test_matching_rule_tolerance_category_and_once_only() -> None:
    expected = [ExpectedFinding(path="a.py", line=10, category="security")]
    m = match_findings([f("a.py", 13), f("a.py", 10)], expected)
    assert len(m.true_positives) == 1 and m.true_positives[0][0].line == 10  # nearest wins
    assert len(m.false_positives) == 1  # the second cannot match the same expected item
    assert match_findings([f("a.py", 14)], expected).missed  # 4 lines away: no match
    assert match_findings([f("a.py", 10, "code_quality")], expected).missed  # wrong category


def test_negatives_count_against_precision() -> None:
    m = match_findings([f("b.py", 8)], [], [NegativeLine(path="b.py", line=8)])
    assert m.on_negatives and m.false_positives


def test_scores_hand_computed() -> None:
    expected = [
        ExpectedFinding(path="a.py", line=1, category="security"),
        ExpectedFinding(path="a.py", line=50, category="test_impact"),
    ]
    m = match_findings([f("a.py", 2), f("c.py", 5)], expected)
    s = score_matches([m])
    # tp=1, fp=1, fn=1 → precision 0.5, recall 0.5, f1 0.5
    assert s["overall"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "tp": 1, "fp": 1, "fn": 1}
    assert s["per_category"]["test_impact"]["recall"] == 0.0  # type: ignore[index]
