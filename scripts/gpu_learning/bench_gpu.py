"""`bench.learning` on a lent GPU, wrapped without editing it (scripts/gpu_learning/README.md).

    python scripts/gpu_learning/bench_gpu.py [--static static.json.xz] [--stop-after-dpo]
        [--skip-decoding] [--timings timings.json] -- BENCH.LEARNING ARGS

- `--static`: each (case, reviewer)'s analyzer-only run, computed on the CPU box by prepare.py, is
  put into the replay environment as a case is first prepared (the analyzers are deterministic);
- `--skip-decoding`: no decoding-cost row (measured on the H100 in the first GPU run);
- `--stop-after-dpo`: base, SFT and DPO only, saved for `--resume` in a later call (one call may
  run 600 s at most);
- no report here (RESULTS.md and the plot are rendered on the CPU box with `--report-only`);
- every Bench stage is timed into `--timings`, with the GPU's peak memory.
"""

from __future__ import annotations

import argparse
import functools
import json
import lzma
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench.learning as bl
from learning.replay import ReplayCase
from learning.strata.replay_cache import CachedReplayEnv
from reviewers.kernel.contracts import ReviewerResult

TIMINGS: dict[str, Any] = {"stages": []}


def _timed(name: str, fn: Callable[..., Any], out: Path | None) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMINGS["stages"].append({"stage": name, "seconds": round(time.monotonic() - started, 1)})
            _write(out)

    return wrapper


def _write(out: Path | None) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            TIMINGS["cuda"] = {
                "device": torch.cuda.get_device_name(0),
                "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
            }
    except Exception as exc:  # noqa: BLE001 - the timings must not end the run
        TIMINGS["cuda_error"] = repr(exc)
    if out is not None:
        out.write_text(json.dumps(TIMINGS, indent=1), encoding="utf-8")


def preload_static(path: Path) -> None:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        static: dict[str, dict[str, Any]] = json.load(handle)

    class PreloadedEnv(CachedReplayEnv):
        def _prepare(self, case: ReplayCase) -> Any:
            known = case.case_id in self._prepared
            ready = super()._prepare(case)
            if not known and case.case_id in static:
                for reviewer, result in static[case.case_id].items():
                    ready.static.setdefault(reviewer, ReviewerResult.model_validate(result))
                TIMINGS["static_preloaded"] = TIMINGS.get("static_preloaded", 0) + 1
            return ready

    setattr(bl, "CachedReplayEnv", PreloadedEnv)  # noqa: B010 - bench.learning builds its env by this name
    TIMINGS["static_cases"] = len(static)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--static", type=Path)
    parser.add_argument("--timings", type=Path)
    parser.add_argument("--skip-decoding", action="store_true")
    parser.add_argument("--stop-after-dpo", action="store_true")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    rest = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    started = time.monotonic()
    if args.static:
        preload_static(args.static)
    TIMINGS["static_load_s"] = round(time.monotonic() - started, 1)
    commit = os.environ.get("GPU_COMMIT")
    if commit:  # a `git archive` has no .git
        setattr(bl, "git_commit", lambda root: commit)  # noqa: B010 - bench.learning's run() calls it by this name
    if args.skip_decoding:

        def no_decoding(self: bl.Bench, policy: Any, cases: Any) -> None:
            self.results["notes"].append("Decoding cost not measured in this run (measured on the H100 before).")

        bl.Bench.decoding_cost = no_decoding  # type: ignore[method-assign]
    if args.stop_after_dpo:

        def no_rl(self: bl.Bench, dpo: Path, *, done: Any = ()) -> None:
            self.log(f"stopping after DPO ({dpo}): RL goes on with --resume")

        bl.Bench.rl_runs = no_rl  # type: ignore[method-assign]
    for name in ("build_env", "read_prompts", "record", "sft_and_dpo", "rl", "resume", "run"):
        setattr(bl.Bench, name, _timed(name, getattr(bl.Bench, name), args.timings))
    bl.report = lambda *a, **k: print("report: rendered on the CPU box (--report-only)")  # type: ignore[assignment]
    try:
        bl.main(rest)
    finally:
        TIMINGS["total_s"] = round(time.monotonic() - started, 1)
        _write(args.timings)


if __name__ == "__main__":
    main()
