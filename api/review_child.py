"""Each review in its own process, so that a review that crashes takes down only itself.

A review parses untrusted diffs and runs the analyzers over them; one that dies (a segfault in a
parser, the kernel's OOM killer, `os._exit` from a plug-in) used to take its worker with it, and
with it every other review that worker was running; the stalled-job recovery then retried it
without counting (issue 40, M1: attempts 0 → 7 against a limit of 5). Here the worker runs each
review as `python -m api.review_child ...` and waits for it in a thread:

- the child builds its own dependencies from the environment (the settings the worker was started
  with, and the database URL it resolved), runs the review, and writes its outcome as JSON to a file
  the worker named: the review id, or the error's message and whether trying again may help;
- a child that ends without writing an outcome died: `ReviewProcessDied`, retryable, so the queue's
  retry policy counts it like any other failed attempt and stops at `max_attempts`, and the webhook
  event is marked failed with how the child ended;
- the child gets SIGTERM if its worker dies (Linux's PR_SET_PDEATHSIG), so nothing is left running.

Starting a Python process costs about a second; a review takes tens of seconds to minutes. A worker
with a model in its own process (REVIEWLOOP_LLM_MODEL_PATH) keeps its reviews in threads, sharing
the model, which takes far longer than a review to load; there a crash still counts as an attempt,
through the stalled-job recovery (api/worker.py).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reviewers.kernel.errors import ReviewloopError

CHILD_COMMAND = (sys.executable, "-m", "api.review_child")
PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>
CHILD_ERROR_EXIT = 3  # the review raised; its outcome file says what


class ReviewProcessDied(ReviewloopError):
    """The review's process ended without an outcome (killed, crashed, out of memory)."""

    retryable = True


@dataclass(frozen=True)
class ReviewInChild:
    """The worker's review function: runs one review in a child process and returns its review id."""

    command: Sequence[str] = CHILD_COMMAND
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def __call__(self, *, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int:
        with tempfile.TemporaryDirectory(prefix="reviewloop-review-") as tmp:
            outcome_path = Path(tmp) / "outcome.json"
            args = [*self.command, "--project", project, "--mr-iid", str(mr_iid), "--outcome", str(outcome_path)]
            if head_sha is not None:
                args += ["--head-sha", head_sha]
            if event_id is not None:
                args += ["--event-id", str(event_id)]
            done = subprocess.run(args, env=dict(self.env), check=False)  # noqa: S603 - our own command
            outcome = read_outcome(outcome_path)
        if outcome is None:
            died = f"the review process {how_it_ended(done.returncode)}"
            raise ReviewProcessDied(died, project=project, mr_iid=mr_iid, head_sha=head_sha)
        review_id = outcome.get("review_id")
        if isinstance(review_id, int):
            return review_id
        raise ReviewloopError(str(outcome.get("error", "the review failed")), retryable=bool(outcome.get("retryable")))


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    return f"exited with code {returncode} before it finished"


def read_outcome(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


ReviewCall = Callable[..., int]


def child_main(review: Callable[[], ReviewCall], argv: Sequence[str] | None = None) -> None:
    """Run one review as the worker asked (`review()` builds the review function) and write its outcome."""
    parser = argparse.ArgumentParser(prog="api.review_child")
    parser.add_argument("--project", required=True)
    parser.add_argument("--mr-iid", type=int, required=True)
    parser.add_argument("--head-sha")
    parser.add_argument("--event-id", type=int)
    parser.add_argument("--outcome", type=Path, required=True)
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the worker's own stop is all there is
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        review_id = review()(project=args.project, mr_iid=args.mr_iid, head_sha=args.head_sha, event_id=args.event_id)
    except Exception as exc:
        retryable = isinstance(exc, ReviewloopError) and exc.retryable
        args.outcome.write_text(json.dumps({"error": str(exc), "retryable": retryable}), encoding="utf-8")
        sys.exit(CHILD_ERROR_EXIT)
    args.outcome.write_text(json.dumps({"review_id": review_id}), encoding="utf-8")


def pipeline_review() -> ReviewCall:
    """The GitLab review flow with its dependencies built from this process's environment."""
    import atexit

    from agent.gitlab.review import build_deps, review_gitlab_merge_request
    from agent.service_settings import Settings
    from agent.session import llm_from_settings, open_session

    settings = Settings()
    session = open_session(settings)
    atexit.register(session.close)
    deps = build_deps(settings, pool=session.pool, dsn=session.dsn, llm=llm_from_settings(settings))

    def review(*, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int:
        return review_gitlab_merge_request(deps, project=project, mr_iid=mr_iid, head_sha=head_sha, event_id=event_id)

    return review


if __name__ == "__main__":
    child_main(pipeline_review)
