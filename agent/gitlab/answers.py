"""Answer a question asked in one of the bot's threads (the worker's `answer_thread_question` job).

A person replied to a finding with a question (agent/thread_replies.py decides that; the API records
the reply and queues this). The answer is posted as a reply in the same thread: the rule's explanation
as the finding states it, the evidence, and how to vote or make the finding quiet. It carries a hidden
marker naming the reply it answers, so a retried job or a redelivered hook answers once.

Not done yet: with a model configured, an answer written from the finding, the code at head and the
rule; this posts the model-free answer in every case.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agent.thread_replies import ANSWER_MARKER, AnsweredFinding, answer_without_model

if TYPE_CHECKING:
    from agent.gitlab.review import ReviewDeps

logger = logging.getLogger(__name__)

FINDING_IN_THREAD_SQL = """
SELECT f.rule, f.category, f.severity, f.title, f.body, f.evidence, f.path, f.line, f.verdict_reason,
       r.project, r.mr_iid
  FROM findings f JOIN reviews r ON r.id = f.review_id
 WHERE f.id = %s AND f.discussion_id = %s AND r.source = 'gitlab'
"""


def answer_thread_question(deps: ReviewDeps, *, finding_id: int, discussion_id: str, note_id: int) -> int | None:
    """Reply to the question `note_id` in the finding's thread; the reply's note id, or None when the
    question was answered already or the finding or its thread is gone."""
    with deps.pool.connection() as conn:
        row = conn.execute(FINDING_IN_THREAD_SQL, (finding_id, discussion_id)).fetchone()
    if row is None:
        logger.info("no finding in that thread any more", extra={"finding_id": finding_id})
        return None
    rule, category, severity, title, body, evidence, path, line, reason, project, mr_iid = row
    thread = next((d for d in deps.platform.discussions(project, int(mr_iid)) if d.id == discussion_id), None)
    if thread is None:
        return None
    marker = ANSWER_MARKER.format(note_id=note_id)
    if any(marker in note.body for note in thread.notes):
        return None
    finding = AnsweredFinding(
        rule=rule,
        category=category,
        severity=severity,
        title=title,
        body=body,
        evidence=evidence,
        path=path,
        line=int(line),
        verdict_reason=reason,
    )
    return deps.platform.reply(
        project, int(mr_iid), discussion_id, body=answer_without_model(finding, replied_note_id=note_id)
    )
