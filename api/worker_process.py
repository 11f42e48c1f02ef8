"""`reviewloop serve`'s worker, run as a child process rather than in the API's process.

A review is CPU-bound Python (diff parsing, the graph, the analyzers' bookkeeping) run in threads.
Run in the API's process, those threads hold the GIL away from the event loop, and the
webhook path collapses. Measured on 2 cores (bench-style load on loopback), with one
10,000-line review at a time in a thread beside the API: 50 webhooks/s were answered at 20/s with a
p99 of 14.8 s (past GitLab's 10 s timeout, after which it disables the hook). With no review running,
the p99 was 6 ms. A shorter GIL switch interval only softened that (p99 0.3 s at 50/s, collapse at
200/s). So `serve` keeps its own process for the API and runs `reviewloop worker` as a child:

- the child gets the resolved database URL, so it never starts a second embedded Postgres, and it
  gets serve's queue options;
- it runs in its own session, so a terminal's Ctrl-C reaches only `serve`, which forwards one
  SIGTERM (a second signal would abort the running reviews, by run_worker's rule);
- it gets SIGTERM if `serve` dies without stopping it (Linux's PR_SET_PDEATHSIG), so nothing is
  left running;
- `serve` starts it again if it exits on its own, unless it exited on a configuration error
  (exit 2): then `serve` stops too, with that error, rather than restart it forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from reviewers.kernel.errors import ConfigError

logger = logging.getLogger(__name__)

PARENT_PID_ENV = "REVIEWLOOP_WORKER_PARENT_PID"
RESTART_DELAY_S = 2.0  # a crash loop costs one log line every two seconds, not a busy loop
POLL_INTERVAL_S = 0.5
PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>
USAGE_ERROR_EXIT = 2  # what `reviewloop` exits with on an error the user must fix (api/commands/service.py)


class WorkerCannotStart(ConfigError):
    """The worker exited on a configuration error: restarting it cannot help."""


def worker_command(*, concurrency: int, heartbeat_interval: float, stalled_after: float, log_level: str) -> list[str]:
    """The `reviewloop worker` command line `serve` runs (no secret on it: they stay in the environment)."""
    return [
        sys.executable, "-c", "from api.cli import main; main()", "worker", "--name", "serve",
        "--concurrency", str(concurrency), "--heartbeat-interval", str(heartbeat_interval),
        "--stalled-after", str(stalled_after), "--log-level", log_level,
    ]  # fmt: skip


class WorkerChild:
    """One worker process: started, restarted when it exits by itself, stopped with one SIGTERM."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str]) -> None:
        self.command = list(command)
        self.env = {**env, PARENT_PID_ENV: str(os.getpid())}
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env, start_new_session=True)
        logger.info("worker process started", extra={"pid": self.process.pid})

    async def supervise(self) -> None:
        """Until cancelled: start the worker again whenever it has exited."""
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            if self.process is None or (code := self.process.poll()) is None:
                continue
            if code == USAGE_ERROR_EXIT:
                # its settings are wrong (it said why on stderr): another start would fail the same way
                raise WorkerCannotStart(f"the worker process could not start (exit {code}); see its error above")
            logger.error("the worker process exited; starting another", extra={"exit_code": code})
            await asyncio.sleep(RESTART_DELAY_S)
            self.restarts += 1
            self.start()

    def stop(self) -> int | None:
        """SIGTERM, then wait while its running reviews finish; its exit code (None if never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait()
        logger.info("worker process stopped", extra={"pid": self.process.pid, "exit_code": code})
        return code


def exit_with_parent() -> None:
    """In a worker `serve` started: get SIGTERM when `serve` dies, and stop now if it already has."""
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent or not parent.isdigit():
        return
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the parent's stop() is all there is
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):
        raise SystemExit(f"reviewloop: the serve process {parent} that started this worker is gone")
