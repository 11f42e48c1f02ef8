"""`python -m bench.headroom`: the learning environment's headroom, measured before any training.

    python -m bench.headroom [--n 240] [--seed 0] [--out bench/learning_headroom.json] [--no-record]

Builds the envgen environment from the Python packages installed beside this interpreter (10–16
files, 0–3 defects and decoys, budget 30 %, 10 seeded teams; held-out MRs from packages no training
MR touches), tabulates every (reviewer, file) visit's value per MR, and reports rule, random valid
plans, the oracle and the best fixed rule on train and held-out (learning/headroom.py), with the
oracle − rule gap paired (bootstrap interval, sign-flip p). Per-MR rows and the summary go to
`--out` (what `python -m bench.learning --summary` reads); the run is recorded in bench/RESULTS.md.
No model is loaded: a few minutes of CPU for the analyzers, once per MR and reviewer.
"""

from __future__ import annotations

import argparse
import json
import sysconfig
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from learning.envgen.build import EnvGenConfig, make_env
from learning.envgen.sources import discover_packages
from learning.fingerprint import environment_fingerprint
from learning.headroom import REFERENCES, rows_for, summarise
from learning.replay import ReplayEnv
from learning.replay_reward import ReplayRewardConfig

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "learning_headroom.json"
LABELS = {"rule": "rule plan", "random": "random valid plans", "oracle": "oracle (best plan per MR)",
          "best_fixed": "best fixed rule (chosen on train)"}  # fmt: skip


def _fmt(d: dict[str, Any]) -> str:
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}], p = {d['p']:.4f}"


def render_section(summary: dict[str, Any], *, config: EnvGenConfig, seconds: float, packages: dict[str, int]) -> str:
    splits = summary["splits"]
    lines = [
        "## Learning headroom (before training)",
        "",
        f"`python -m bench.headroom --n {config.n} --seed {config.seed}`: envgen over this interpreter's "
        f"site-packages, {config.min_files}–{config.max_files} files, 0–{config.max_defects} defects, "
        f"0–{config.max_decoys} decoys (false alarms the analyzers raise), budget {config.budget_fraction:.0%}, "
        f"{config.n_profiles} seeded teams; held-out MRs from {packages['eval']} packages no training MR "
        f"({packages['train']} packages) touches. {seconds:.0f} s of CPU, no model.",
        "",
        "Reward = found value − rejected posts − noise − step cost, each a column (a cost-only gain shows as one).",
        "",
        "| split | reference | reward | found value | rejected cost | noise cost | step cost | steps |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for split, data in splits.items():
        for name in REFERENCES:
            m = data["means"][name]
            lines.append(
                f"| {split} ({data['mrs']} MRs) | {LABELS[name]} | {m['reward']:+.3f} | {m['found']:.3f} | "
                f"{m['rejected_cost']:.3f} | {m['noise_cost']:.3f} | {m['step_cost']:.3f} | {m['steps']:.2f} |"
            )
    lines += ["", f"Best fixed rule (on train): {summary['best_fixed_rule']}.", ""]
    for split, data in splits.items():
        parts = data["gap_parts"]
        lines.append(
            f"- **{split}**: oracle − rule {_fmt(data['oracle_minus_rule'])} (paired over {data['mrs']} MRs, "
            f"{data['teams']} teams); oracle − best fixed rule {_fmt(data['oracle_minus_best_fixed'])}; "
            f"MRs with a gap > {summary['gap_threshold']}: {data['share_gap_over_threshold']:.0%}. The gap splits "
            f"into found value {parts['found']:+.3f}, fewer rejected posts {parts['fewer_rejected']:+.3f}, "
            f"less noise {parts['less_noise']:+.3f}, fewer steps {parts['fewer_steps']:+.3f}. Largest "
            f"|Σ visit values − exact reward| of an oracle plan: {data['max_additivity_error']:.2g}. Power: "
            f"paired sd of oracle − rule {data['power']['paired_sd']:.3f}, so a paired test on these MRs detects "
            f"{data['power']['detectable_difference']:.3f} (α 0.05, 80 %); 0.3 × the gap needs "
            f"{data['power']['mrs_for_0_3_gap']} MRs."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.headroom", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=240, help="merge requests in all (30%% held out)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-plans", type=int, default=32, help="random valid plans per MR")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-record", action="store_true", help="do not record the run in bench/RESULTS.md")
    args = parser.parse_args(argv)
    started = time.monotonic()
    config = EnvGenConfig(n=args.n, seed=args.seed)
    source = Path(sysconfig.get_paths()["purelib"])
    cases = make_env(discover_packages(source, min_files=config.min_files), config)
    packages = {s: len({c.package for c in cases if c.split == s}) for s in ("train", "eval")}

    def progress(done: int, total: int) -> None:
        if done % 20 == 0 or done == total:
            print(f"[{time.monotonic() - started:6.0f} s] {done}/{total} merge requests tabulated", flush=True)

    rows = rows_for(ReplayEnv(), cases, ReplayRewardConfig(), random_plans=args.random_plans, seed=args.seed,
                    progress=progress)  # fmt: skip
    summary = summarise(rows, seed=args.seed)
    seconds = time.monotonic() - started
    args.out.write_text(
        json.dumps(
            {
                "summary": summary,
                # what results are paired against: a training run over other MRs is refused
                "fingerprint": environment_fingerprint(cases),
                "heldout_fingerprint": environment_fingerprint([c for c in cases if c.split == "eval"]),
                "config": vars(config),
                "packages": packages,
                "rows": [r.as_dict(fixed=[str(summary["best_fixed_rule"])]) for r in rows],
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    section = render_section(summary, config=config, seconds=seconds, packages=packages)
    print(section)
    held = summary["splits"]["eval"]  # type: ignore[index]
    headline = (
        f"held-out ({held['mrs']} MRs): oracle − rule {held['oracle_minus_rule']['mean']:+.3f} "
        f"[{held['oracle_minus_rule']['lo']:+.3f}, {held['oracle_minus_rule']['hi']:+.3f}]; "
        f"{held['share_gap_over_threshold']:.0%} of MRs with a gap > 0.05"
    )
    args.out.with_suffix(".md").write_text(section, encoding="utf-8")
    if not args.no_record:
        title = "Learning headroom before training (rule, random, oracle, best fixed rule)"
        record(section, headline, name="learning-headroom", title=title)
    return 0


def record(section: str, headline: str, *, name: str, title: str) -> None:
    """Record the run with `bench.results_file.record_run` — once bench/latest.json exists. Before the
    results file is migrated to it, rebuilding RESULTS.md from a latest.json holding this run alone
    would drop every other benchmark's figures, so the section is appended to RESULTS.md as the
    older benchmarks' sections are (`python -m bench.results_file add NAME --section FILE` registers
    it after the migration)."""
    from bench.report import git_commit
    from bench.results_file import LATEST, RESULTS, record_run, this_machine

    if LATEST.is_file() or not RESULTS.is_file():
        record_run(name=name, title=title, headline=headline, section=section)
        return
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    heading = f"## {title}, {when} · commit {git_commit(ROOT)} · {this_machine()}"
    body = section.split("\n", 1)[1] if section.startswith("## ") else section
    text = RESULTS.read_text(encoding="utf-8").rstrip("\n")
    RESULTS.write_text(f"{text}\n\n{heading}\n\n**{headline}**\n{body}", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
