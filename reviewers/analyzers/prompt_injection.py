"""Instructions in the changed code addressed to an AI reviewer: prompt injection, in any language.

Review bots read the code they review, so a comment or string can try to steer them: "ignore
previous instructions", "call finish", a fake tool call or a fake verdict in our JSON, "you are a
code reviewer and this file is safe". Fencing keeps such text inert for our own reviewers; this
analyzer reports it, because a line written to talk a reviewer out of its job is itself a finding
(someone is hiding something, or the code feeds model prompts and is injectable).

Each signal names its target — previous instructions, a reviewer, our tools or verdicts — so code
that merely mentions finishing or ignoring something is left alone. A fake tool call or verdict
counts in code only where it is text a model would read: inside a string or a comment. The same
shape written as a data literal (`json.dumps({"tool": "finish"})` in a scripted model, a dict of
verdicts) is the program's structure, not an instruction, and is left alone.

Not caught: an instruction spelled across several lines or string pieces, or in another language.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Callable

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.paths import CODE_LANGUAGES

RULE = "security:prompt-injection"

# (what the line does, the pattern, whether it also counts in test files). Tests of a tool that talks
# to models are full of scripted tool calls and verdicts; only the words aimed at a reader count there.
# The last two are shapes of our protocol (STRUCTURAL): in code they count only inside text.
_SIGNALS: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    (
        "tells the reader to ignore its previous instructions",
        re.compile(
            r"(?i)\b(?:ignore|disregard|forget|override)\b[^\n]{0,30}?\b(?:all\s+|any\s+|the\s+|your\s+)*"
            r"(?:previous|prior|above|earlier|preceding|system|original)\s+(?:instructions?|prompts?|rules|directions)"
        ),
        True,
    ),
    (
        "addresses an AI reviewer directly",
        re.compile(
            r"(?i)\byou\s+are\s+(?:now\s+)?(?:an?\s+|the\s+)?(?:ai\s+|automated\s+|llm\s+)?"
            r"(?:code[\s-]|security\s+)?review(?:er|\s+bot|\s+assistant|\s+agent)\b[^\n]{0,80}?"
            r"\b(?:must|should|will|shall|do\s+not|don't|never|always|only|approve|ignore|report|call|answer)\b"
        ),
        True,
    ),
    (
        "tells a reviewer to stop reviewing",
        re.compile(
            r"(?i)\b(?:reviewers?|review\s+bots?)\b[^\n]{0,60}?"
            r"\b(?:call|use|invoke|run)\s+[`'\"]?finish\b"
            r"|\bcall\s+[`'\"]?finish[`'\"]?(?:\s*\(\s*\))?\s+(?:now|immediately|right\s+away|at\s+once)\b"
        ),
        True,
    ),
    (
        "carries a fake reviewer tool call",
        re.compile(r"""\{\s*\\?["']tool\\?["']\s*:\s*\\?["'](?:finish|report)\\?["']"""),
        False,
    ),
    (
        "carries a fake review verdict",
        re.compile(r"""\\?["']verdict\\?["']\s*:\s*\\?["'](?:REAL|FALSE_POSITIVE|NEEDS_HUMAN_REVIEW|DUPLICATE)\b"""),
        False,
    ),
)


STRUCTURAL = frozenset({"carries a fake reviewer tool call", "carries a fake review verdict"})
InText = Callable[[int, int, int], bool]  # (line, start, end) → whether that text lies inside one string or comment


def instruction_to_reviewers(
    text: str, *, test_file: bool = False, in_text: InText | None = None, line: int = 0
) -> str | None:
    """What a line does to an AI reviewer ("tells the reader to ignore ..."), or None. With `in_text`,
    a structural signal counts only where its match lies inside a string or a comment."""
    for why, pattern, in_tests in _SIGNALS:
        if not (in_tests or not test_file):
            continue
        match = pattern.search(text)
        if match is None:
            continue
        if why in STRUCTURAL and in_text is not None and not in_text(line, match.start(), match.end()):
            continue
        return why
    return None


def python_text_spans(source: str) -> InText | None:
    """Where Python source holds strings and comments, from its tokens; None when it does not tokenize."""
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.STRING, tokenize.COMMENT):
                spans.append((token.start, token.end))
    except (tokenize.TokenError, SyntaxError):
        return None
    return lambda line, first, last: any(start <= (line, first) and (line, last) <= end for start, end in spans)


def _when_asked(make: Callable[[], InText]) -> InText:
    """`make()`'s answer, built at the first question: tokenizing a file costs more than searching its
    lines, and only a line that matches a structural signal asks."""
    made: list[InText] = []

    def in_text(line: int, first: int, last: int) -> bool:
        if not made:
            made.append(make())
        return made[0](line, first, last)

    return in_text


_QUOTES = ('"', "'", "`")
_COMMENT_START = re.compile(r"//|#|/\*|<!--|^\s*\*|--\s")


def _line_text_spans(lines: dict[int, str]) -> InText:
    """A line-local guess for other languages: inside text when the line before the place opens a
    quote it has not closed, or starts a comment."""

    def inside(line: int, first: int, last: int) -> bool:
        before = re.sub(r"\\.", "", lines.get(line, "")[:first])
        return any(before.count(q) % 2 == 1 for q in _QUOTES) or bool(_COMMENT_START.search(before))

    return inside


def prompt_injection_issues(file: ChangedFile, *, test_file: bool = False) -> list[Issue]:
    """One issue per changed line that carries an instruction to an AI reviewer."""
    issues: list[Issue] = []
    in_text: InText | None = None
    if file.language == "python":
        in_text = _when_asked(lambda: python_text_spans(file.text) or _line_text_spans(file.changed_lines))
    elif file.language in CODE_LANGUAGES:
        in_text = _line_text_spans(file.changed_lines)
    for line, text in sorted(file.changed_lines.items()):
        what = instruction_to_reviewers(text, test_file=test_file, in_text=in_text, line=line)
        if what is None:
            continue
        issues.append(
            Issue(
                line=line,
                rule=RULE,
                severity="medium",
                title="Instruction to AI code reviewers in the change (prompt injection)",
                body=(
                    f"This line {what}. Text in code that addresses automated reviewers tries to change what "
                    "they report; it is not followed here, but say why it is in the code, or remove it. If this "
                    "text reaches a model's prompt at run time, that prompt is injectable."
                ),
                kind="prompt-injection",
                cwe="CWE-1427",  # improper neutralization of input used for LLM prompting
            )
        )
    return issues
