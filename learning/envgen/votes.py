"""The team profile votes on a stored review, through the same feedback table people's 👍/👎 go to.

After a synthesised merge request has been reviewed by the real pipeline (its findings in Postgres),
`cast_profile_votes` records the profile's vote on every posted finding with
`agent.store.feedback.record_vote`; the dataset builder (learning/episodes.py, learning/datasets.py)
then reads them like any team's votes. The loop is thus driven by votes, not only by planted labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.finding_kinds import finding_kind
from agent.store.db import Database, connection
from agent.store.feedback import record_vote
from learning.envgen.profile import TeamProfile

PROFILE_USER_KEY = "envgen:team-profile"


@dataclass(frozen=True)
class VoteCount:
    accepted: int
    rejected: int
    abstained: int


def cast_profile_votes(
    db: Database, review_id: int, profile: TeamProfile, *, user_key: str = PROFILE_USER_KEY
) -> VoteCount:
    """Vote 👍/👎 as the profile would on each posted (verified REAL) finding of the review."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT id, path, category, rule, title FROM findings WHERE review_id = %s AND verdict = 'REAL'"
            " ORDER BY id",
            (review_id,),
        ).fetchall()
    accepted = rejected = abstained = 0
    for finding_id, path, category, rule, title in rows:
        vote = profile.vote(path=path, category=category, kind=finding_kind(rule=rule, title=title))
        if vote is None:
            abstained += 1
            continue
        record_vote(db, finding_id, user_key=user_key, source="emoji", value=1 if vote == "accepted" else -1)
        accepted += vote == "accepted"
        rejected += vote == "rejected"
    return VoteCount(accepted=accepted, rejected=rejected, abstained=abstained)
