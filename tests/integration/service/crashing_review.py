"""A review child for the crash tests: `python crashing_review.py --project ... --mr-iid N ...`.

The review hook the test installs: for the merge request named by CRASH_MR_IID it kills its own
process (`os._exit`, as a segfault or the OOM killer would end it, with no outcome written); for any
other it writes a `reviews` row like the pipeline and returns its id. It appends "start <iid>" to
REVIEW_LOG so the test can count the attempts.
"""

from __future__ import annotations

import os

import psycopg

from api.review_child import child_main

CRASH_EXIT = 9


def review(*, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int:
    del event_id
    with open(os.environ["REVIEW_LOG"], "a", encoding="utf-8") as log:
        log.write(f"start {mr_iid}\n")
    if mr_iid == int(os.environ["CRASH_MR_IID"]):
        os._exit(CRASH_EXIT)
    with psycopg.connect(os.environ["REVIEWLOOP_DATABASE_URL"]) as conn:
        row = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, head_sha, status, started_at, finished_at)"
            " VALUES ('gitlab', %s, %s, %s, 'done', now(), now()) RETURNING id",
            (project, mr_iid, head_sha),
        ).fetchone()
    assert row is not None
    return int(row[0])


if __name__ == "__main__":
    child_main(lambda: review)
