"""Data-parallel StraTA (issue 14, Done when 4): two trainer processes under `accelerate launch` on the
CPU (gloo) for two steps end with identical parameters on both ranks, equal to what one process makes
of the same rollouts, and different from where they started.

accelerate 1.15's `--cpu` flag starts a single process unless given an MPI host file, so the two
processes are started by its torchrun launcher (`--multi_gpu`); without CUDA they form a gloo group
(learning/strata/distributed.py). The worker asserts it really ran with two ranks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agent.strategy import STRATEGY_SYSTEM_PROMPT
from learning.replay import ReplayEnv, write_jsonl_cases
from learning.strata.synthetic import SyntheticConfig, generate_replay_set
from learning.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("strata_dp_worker.py")
# float32 sums in another order (two ranks' gradients added, then clipped) differ in the last bits, and
# Adam divides by the root of tiny second moments, which magnifies those bits for near-zero gradients:
# each weight must agree to a tenth of one Adam step (lr 1e-2), the whole update to 0.1% of its norm.
ATOL = 1e-3
MAX_RELATIVE_UPDATE_GAP = 1e-3


def _run(command: list[str], out: Path) -> None:
    out.mkdir(parents=True)
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), str(WORKER.parent)]),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_two_ranks_make_the_single_process_update(tmp_path: Path) -> None:
    # a seed whose two steps both train (a skipped step would compare nothing); seed 2 did until the
    # planted tokens gained GitHub's checksum (79d8e65), which changed the text the tiny tokenizer learns
    cases = generate_replay_set(SyntheticConfig(n_train=8, n_eval=1, languages=("javascript",), seed=3))
    replay = write_jsonl_cases(tmp_path / "replay.jsonl", cases)
    env = ReplayEnv()
    corpus = [STRATEGY_SYSTEM_PROMPT] + [env.reset(c) for c in cases]
    base = build_tiny_model(tmp_path / "base", seed=0, corpus=corpus, vocab_size=512)
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    port = str(29500 + os.getpid() % 1000)  # parallel test runs must not share a rendezvous port
    _run([accelerate, "launch", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
          "--dynamo_backend", "no", "--multi_gpu", "--main_process_port", port,
          str(WORKER), str(base), str(replay), str(tmp_path / "dp")], tmp_path / "dp")  # fmt: skip
    _run([sys.executable, str(WORKER), str(base), str(replay), str(tmp_path / "one")], tmp_path / "one")

    rank0, rank1 = (torch.load(tmp_path / "dp" / f"params-rank{r}.pt", weights_only=False) for r in (0, 1))
    single = torch.load(tmp_path / "one" / "params-rank0.pt", weights_only=False)
    assert rank0["world_size"] == rank1["world_size"] == 2 and single["world_size"] == 1
    assert [m["step"] for m in rank0["metrics"]] == [1, 2] and not any(m["skipped"] for m in rank0["metrics"])
    start = dict(AutoModelForCausalLM.from_pretrained(str(base)).named_parameters())
    moved, gap, norm = 0, 0.0, 0.0
    for name, p0 in rank0["params"].items():
        assert torch.equal(p0, rank1["params"][name]), f"{name} differs between the ranks"
        torch.testing.assert_close(p0, single["params"][name], atol=ATOL, rtol=0.0)
        initial = start[name].detach()
        moved += not torch.equal(p0, initial)
        gap += float(((p0 - initial) - (single["params"][name] - initial)).pow(2).sum())
        norm += float((single["params"][name] - initial).pow(2).sum())
    assert moved == len(rank0["params"]), "every trained tensor should have moved in two steps"
    print(f"\nupdate norm {norm**0.5:.4f}; two ranks vs one process: relative gap {(gap / norm) ** 0.5:.2e}")
    assert (gap / norm) ** 0.5 < MAX_RELATIVE_UPDATE_GAP
    # the step metrics, gathered over ranks, are the single process's
    for m_dp, m_one in zip(rank0["metrics"], single["metrics"], strict=True):
        for key in ("reward_mean", "reward_std", "groups", "groups_kept", "trained_rollouts", "valid_share"):
            assert m_dp[key] == pytest.approx(m_one[key]), key
        assert m_dp["loss"] == pytest.approx(m_one["loss"], rel=MAX_RELATIVE_UPDATE_GAP)
    # rank 0 alone checkpointed
    assert (tmp_path / "dp" / "run").is_dir()
