"""The search prefilter: a file without a pattern's required literal is skipped before its lines are
matched, and that never loses a hit (every line match contains the literal)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.diff import parse_unified_diff
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.pattern_search import PatternSearch, required_literal


def test_the_required_literal_is_what_every_match_contains() -> None:
    assert required_literal(r"\bparse_config\b") == "parse_config"
    assert required_literal(r"(def|class|function) +load_rows\b") == "load_rows"
    assert required_literal(r"(abc)+x") == "abc"  # a repeat of at least one
    assert required_literal(r"x{0,2}yz") == "yz"  # an optional part gives nothing
    assert required_literal(r"(?i:ab)cde") == "cde"  # nor does a case-insensitive one
    for nothing in (r"(?i)abc", r"(a|a)*$", r"[ab]+", r"\p{L}+", r"a?"):
        assert required_literal(nothing) == "", nothing
    assert PatternSearch("exec(", literal_on_error=True).literal == "exec("  # searched as a literal


ATOMS = st.sampled_from(["a", "b", "ab", "ba", ".", "[ab]", "\\b", "x", "(a|b)", "(?i:a)", "\\w", "^", "$"])
QUANTIFIERS = st.sampled_from(["", "", "", "?", "*", "+", "{0,2}", "{1,2}"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(ATOMS, QUANTIFIERS), min_size=1, max_size=5))
    body = "".join(f"(?:{a}){q}" if q and len(a) > 1 else a + q for a, q in parts)
    return f"({body})" if draw(st.booleans()) else body


@settings(max_examples=300, deadline=None)
@given(patterns(), st.lists(st.text(alphabet="abxAB _", max_size=8), min_size=1, max_size=6))
def test_a_file_the_prefilter_skips_has_no_matching_line(pattern: str, lines: list[str]) -> None:
    search = PatternSearch(pattern)
    if any(search.matches(line) for line in lines):  # the engine's own answer, line by line
        assert search.may_match("\n".join(lines) + "\n"), (pattern, search.literal, lines)


def test_workspaces_find_the_same_hits_with_the_prefilter() -> None:
    files = {f"pkg/m{i}.py": "".join(f"value_{i}_{n} = {n}\n" for n in range(30)) for i in range(5)}
    workspace = SnapshotWorkspace(files)
    hits = workspace.search(r"\bvalue_3_1\d\b")
    assert [(h.path, h.line) for h in hits] == [("pkg/m3.py", n) for n in range(11, 21)]
    assert workspace.search(r"\bnowhere\b") == []
    diff = parse_unified_diff(
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n keep = 1\n-old = 2\n+new_name = 2\n"
    )
    assert [(h.path, h.line) for h in DiffWorkspace(diff).search(r"new_\w+ =")] == [("app.py", 2)]
    assert DiffWorkspace(diff).search(r"old_\w+") == []
