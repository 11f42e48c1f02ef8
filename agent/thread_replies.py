"""Replies to the bot's threads: what a reply asks for, and the answer a thread gets without a model.

A person who replies to a finding either asks about it ("why is this a problem?"), disputes it ("this
is a false positive: the input is validated above"), or comments. A question gets an answer in the
thread (`answer_without_model`: the rule's explanation as the finding states it, the evidence it rests
on, and how to vote or make it quiet). A dispute is feedback: it counts as a 👎 on the finding, as an
explicit thumb would (api/triage.py). Anything else stays a comment.

The classification is deliberately plain (a few phrases, a question mark): it decides whether to
answer and whether a reply is a vote, and a person reads the thread either way. It does not catch
irony, a dispute phrased as a question ("isn't this validated already?" is a question, answered), or
another language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agent.sanitize import code_block, inline_code, neutralise

ReplyIntent = Literal["question", "dispute", "comment"]

# Phrases that reject the finding itself. Each was chosen for being unambiguous in a reply to a bot's
# finding; "wrong" alone is not one ("what's wrong here?" asks).
DISPUTE = re.compile(
    r"\b(false[- ]positive|not a (bug|problem|real (issue|problem|bug))|not an issue|no issue here"
    r"|(this|that|it) is (wrong|incorrect|fine|intended|intentional|by design|safe)"
    r"|(this|that|it)'s (wrong|incorrect|fine|intended|intentional|by design|safe)"
    r"|by design|works as intended|i disagree|disagree|won'?t fix|ignore this)\b",
    re.IGNORECASE,
)
QUESTION_START = re.compile(
    r"^\s*(@\S+\s+)?(why|what|how|where|when|which|is|are|does|do|can|could|should|would|will)\b", re.IGNORECASE
)
# Marks the bot's answer to one reply, so a redelivered hook or a retried job answers it once.
ANSWER_MARKER = "<!-- reviewloop:answer:{note_id} -->"


def reply_intent(text: str) -> ReplyIntent:
    """What a reply to a finding's thread asks for; a dispute wins over a question it contains."""
    if DISPUTE.search(text):
        return "dispute"
    if "?" in text or QUESTION_START.search(text):
        return "question"
    return "comment"


@dataclass(frozen=True)
class AnsweredFinding:
    """What the store keeps of a posted finding, as much as an answer shows."""

    rule: str
    category: str
    severity: str
    title: str
    body: str
    evidence: str
    path: str
    line: int
    verdict_reason: str


def answer_without_model(finding: AnsweredFinding, *, replied_note_id: int) -> str:
    """The answer to a question in the finding's thread when no model is configured: the rule's
    explanation, the evidence, and how to vote or make the finding quiet."""
    rule = inline_code(finding.rule or f"{finding.category}/generic")
    where = inline_code(f"{finding.path}:{finding.line}")
    lines = [
        f"**Why this was flagged** ({rule}, {finding.severity}, at {where}):",
        "",
        neutralise(finding.body, max_chars=1500),
    ]
    if finding.evidence:
        lines += ["", "The code it rests on, as it reads at the head commit:", "", code_block(finding.evidence)]
    if finding.verdict_reason:
        lines += ["", f"The verifier kept it because: {neutralise(finding.verdict_reason, max_chars=300)}"]
    lines += [
        "",
        "**If it is wrong**: react 👎 on the first note of this thread (or reply saying it is a false "
        "positive); that is recorded as feedback on this finding and its rule. Once three people on this "
        f"project have rejected {rule}'s findings and none accepted one, reviewloop stops reporting them "
        "here (a high or critical security finding goes to a person instead). 👍 says it was right.",
        "",
        "**To make it quiet** for a path: add the path to `exclude` in the repository's `.reviewloop.toml`, "
        "or raise `min_severity` there.",
        "",
        ANSWER_MARKER.format(note_id=replied_note_id),
    ]
    return "\n".join(lines)
