"""Build, on a CPU box, what `bench.learning` on a lent GPU reads instead of computing there.

- env.jsonl: envgen over *this* interpreter's site-packages, as `Bench.build_env` builds it (on the
  device envgen would read the device's own packages and build another environment);
- static.json: every (case, reviewer)'s analyzer-only run (`ReplayEnv.static_result`: deterministic,
  pure CPU), which `bench_gpu.py` loads into the replay environment there.

    python scripts/gpu_learning/prepare.py OUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
import time
from pathlib import Path

from bench.learning import BenchConfig
from learning.envgen.build import EnvGenConfig, make_env
from learning.envgen.sources import discover_packages
from learning.replay import ReplayEnv, read_jsonl_cases, write_jsonl_cases
from reviewers.kernel.contracts import REVIEWERS


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env_file = out / "env.jsonl"
    started = time.monotonic()
    if not env_file.is_file():
        c = BenchConfig()
        config = EnvGenConfig(n=c.n_mrs, seed=c.env_seed)
        packages = discover_packages(Path(sysconfig.get_paths()["purelib"]), min_files=config.min_files)
        write_jsonl_cases(env_file, make_env(packages, config))
    cases = read_jsonl_cases(env_file)
    digest = hashlib.sha256(env_file.read_bytes()).hexdigest()
    print(f"env: {len(cases)} cases, sha256 {digest} ({time.monotonic() - started:.0f} s)", flush=True)
    heldout = [x.case_id for x in cases if x.split == "eval"]
    recorded = json.loads(Path("bench/learning_results.json").read_text(encoding="utf-8"))["held_out_case_ids"]
    print(f"held-out ids as in bench/learning_results.json: {heldout == recorded}", flush=True)
    started = time.monotonic()
    env = ReplayEnv()
    static = {x.case_id: {r: env.static_result(x, r).model_dump(mode="json") for r in REVIEWERS} for x in cases}
    (out / "static.json").write_text(json.dumps(static), encoding="utf-8")
    print(f"static: {len(static)} cases × {len(REVIEWERS)} reviewers ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
