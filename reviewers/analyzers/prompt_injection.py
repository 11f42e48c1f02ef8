"""Instructions in the changed code addressed to an AI reviewer: prompt injection, in any language.

Review bots read the code they review, so a comment or string can try to steer them: "ignore
previous instructions", "call finish", a fake tool call or a fake verdict in our JSON, "you are a
code reviewer and this file is safe". Fencing keeps such text inert for our own reviewers; this
analyzer reports it, because a line written to talk a reviewer out of its job is itself a finding
(someone is hiding something, or the code feeds model prompts and is injectable).

Each signal names its target — previous instructions, a reviewer, our tools or verdicts — so code
that merely mentions finishing or ignoring something is left alone.
"""

from __future__ import annotations

import re

from reviewers.analyzers.changed_file import ChangedFile, Issue

RULE = "security:prompt-injection"

# (what the line does, the pattern, whether it also counts in test files). Tests of a tool that talks
# to models are full of scripted tool calls and verdicts; only the words aimed at a reader count there.
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


def instruction_to_reviewers(text: str, *, test_file: bool = False) -> str | None:
    """What a line does to an AI reviewer ("tells the reader to ignore ..."), or None."""
    return next(
        (why for why, pattern, in_tests in _SIGNALS if (in_tests or not test_file) and pattern.search(text)), None
    )


def prompt_injection_issues(file: ChangedFile, *, test_file: bool = False) -> list[Issue]:
    """One issue per changed line that carries an instruction to an AI reviewer."""
    issues: list[Issue] = []
    for line, text in sorted(file.changed_lines.items()):
        what = instruction_to_reviewers(text, test_file=test_file)
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
