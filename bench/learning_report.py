"""The learning benchmark's numbers: bootstrap intervals over merge requests, the RESULTS.md table and
the reward plot, all from the run's saved JSON (so `--report-only` re-renders a run without re-running).

Every statistic is over held-out merge requests: a stage's per-MR values are resampled with
replacement (percentile bootstrap, seeded). A rate that is a ratio of counts (defects found of those
planted, accepted votes of those cast) is resampled as a ratio of sums over the same draws, so a
merge request with no defect weighs nothing in the found rate. RL with several seeds is one value
per merge request: the mean over seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
LEVEL = 0.95
STAGE_ORDER = ("base", "sft", "dpo", "rl")
MODES = ("greedy", "sampled")
SECTION_TITLE = "## Learning: base → SFT → DPO → StraTA RL on SmolLM2-135M (`make bench-learning`)"


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = LEVEL
) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its percentile-bootstrap interval."""
    return bootstrap_ratio_ci(values, [1.0] * len(values), resamples=resamples, seed=seed, level=level)


def bootstrap_ratio_ci(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    level: float = LEVEL,
) -> tuple[float, float, float]:
    """(Σnum/Σden, low, high) with the items resampled together; NaN where the denominator is 0."""
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.shape != den.shape or num.ndim != 1 or not len(num):
        raise ValueError(f"need equal non-empty 1-d sequences, got {num.shape} and {den.shape}")
    point = float(num.sum() / den.sum()) if den.sum() else float("nan")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(num), size=(resamples, len(num)))
    sums_den = den[draws].sum(axis=1)
    ok = sums_den > 0
    if not ok.any():
        return point, float("nan"), float("nan")
    stats = num[draws].sum(axis=1)[ok] / sums_den[ok]
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return point, float(low), float(high)


def per_mr_mean(runs: Sequence[Sequence[Mapping[str, float]]], key: str) -> list[float]:
    """One value per merge request: `key` averaged over runs (seeds) that evaluated the same MRs in order."""
    if not runs:
        return []
    return [float(np.mean([run[i][key] for run in runs])) for i in range(len(runs[0]))]


def summarize(runs: Sequence[Sequence[Mapping[str, float]]]) -> dict[str, tuple[float, float, float]]:
    """The table's numbers for one stage and mode (runs: one per-MR list per seed)."""
    return {
        "reward": bootstrap_ci(per_mr_mean(runs, "reward")),
        "found": bootstrap_ratio_ci(per_mr_mean(runs, "found"), per_mr_mean(runs, "defects")),
        "decoy_posts": bootstrap_ci(per_mr_mean(runs, "decoy_posts")),
        "acceptance": bootstrap_ratio_ci(per_mr_mean(runs, "accepted_votes"), per_mr_mean(runs, "votes")),
        "valid": bootstrap_ci(per_mr_mean(runs, "valid")),
    }


def paired_difference(
    runs_a: Sequence[Sequence[Mapping[str, float]]],
    runs_b: Sequence[Sequence[Mapping[str, float]]],
    key: str = "reward",
) -> tuple[float, float, float]:
    """Mean of a − b per merge request (each averaged over its seeds) with its bootstrap interval."""
    a, b = per_mr_mean(runs_a, key), per_mr_mean(runs_b, key)
    return bootstrap_ci([x - y for x, y in zip(a, b, strict=True)])


def _fmt(stat: tuple[float, float, float], digits: int = 3) -> str:
    point, low, high = stat
    if np.isnan(point):
        return "n/a"
    if np.isnan(low):
        return f"{point:.{digits}f}"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _stage_runs(results: Mapping[str, Any], stage: str, mode: str) -> list[list[dict[str, float]]]:
    entry = results.get("stages", {}).get(stage, {}).get(mode)
    return list(entry) if entry else []


def render_markdown(results: Mapping[str, Any], paired: Mapping[str, Any] | None = None) -> str:
    """The RESULTS.md section of one run; `paired` is `bench.learning_summary.summary` of it (the
    stages paired per MR with the headroom run's rule and oracle plans)."""
    lines = [
        SECTION_TITLE,
        "",
        f"Machine: {results.get('machine', '?')}. Date: {results.get('date', '?')}."
        f" Duration: {results.get('duration_s', 0) / 60:.1f} min. {results.get('setup', '')}",
        "",
        *paired_lines(paired),
        "Held-out: 95% bootstrap intervals over merge requests (RL: per-MR mean over its seeds). reward ="
        " replay reward; found = planted defects found within the budget / planted; decoy posts = findings"
        " posted on decoys per MR; acceptance = the team profile's 👍 share of the votes it cast on what was"
        " posted; valid = answers valid under the one rule (`check_valid_strategy`: parsed, no reviewer left"
        " out that serving would add back).",
        "",
        "| stage | mode | seeds | reward | found | decoy posts | acceptance | valid |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stage in STAGE_ORDER:
        for mode in MODES:
            runs = _stage_runs(results, stage, mode)
            if not runs:
                continue
            s = summarize(runs)
            lines.append(
                f"| {stage} | {mode} | {len(runs)} | {_fmt(s['reward'])} | {_fmt(s['found'], 2)} |"
                f" {_fmt(s['decoy_posts'], 2)} | {_fmt(s['acceptance'], 2)} | {_fmt(s['valid'], 2)} |"
            )
    full = _stage_runs(results, "rl", "greedy")
    if len(full) > 1:
        seeds = ", ".join(f"{np.mean([o['reward'] for o in run]):.3f}" for run in full)
        lines += ["", f"RL held-out greedy reward per seed (0, 1, …): {seeds}."]
    ablations = results.get("ablations", {})
    if ablations and full:
        lines += [
            "",
            "Ablations at equal compute (same steps, merge requests per step and trained strategies per"
            " merge request), one seed (0); greedy held-out reward; effect = ablation − full, paired per MR, against"
            " full with the same seed and against the mean of full's seeds. The intervals resample merge requests,"
            " not seeds: the spread between full's seeds above is the yardstick for a one-seed effect.",
            "",
            "| ablation | reward | effect vs full seed 0 | effect vs full (seed mean) | note |",
            "|---|---|---|---|---|",
        ]
        for name, entry in ablations.items():
            runs = entry.get("greedy") or []
            if runs:
                s = summarize(runs)
                same_seed = _fmt(paired_difference(runs, full[:1]))
                mean_seeds = _fmt(paired_difference(runs, full))
                lines.append(f"| {name} | {_fmt(s['reward'])} | {same_seed} | {mean_seeds} | {entry.get('note', '')} |")
            else:
                lines.append(f"| {name} | not run | | | {entry.get('note', '')} |")
    collapse = results.get("collapse")
    if collapse:
        lines += ["", f"Collapse watch (seed 0, {collapse.get('steps', '?')} steps): " + collapse.get("summary", "")]
    lines += decoding_lines(results.get("decoding"))
    for note in results.get("notes", []):
        lines += ["", note]
    lines.append("")
    return "\n".join(lines)


def plot_rewards(results: Mapping[str, Any], out: Path) -> Path:
    """Held-out greedy reward per RL step per variant (step 0: the DPO model RL starts from), with the
    base and SFT levels as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, points in sorted(results.get("curves", {}).items()):
        if points:
            steps, rewards = zip(*sorted(points), strict=True)
            ax.plot(steps, rewards, marker="o", label=variant)
    for stage, style in (("base", ":"), ("sft", "--")):
        runs = _stage_runs(results, stage, "greedy")
        if runs:
            ax.axhline(float(np.mean(per_mr_mean(runs, "reward"))), linestyle=style, color="grey", label=stage)
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out mean reward (greedy)")
    ax.set_title("StraTA RL on SmolLM2-135M (LoRA, CPU): held-out reward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _pair(d: Mapping[str, float] | None) -> str:
    if not d:
        return ""
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}], p = {d['p']:.4f}"


def paired_lines(paired: Mapping[str, Any] | None) -> list[str]:
    """Issue 24, Build 6: each stage paired MR by MR with the rule plan, the base model and the stage
    before it, and the share of the oracle − rule headroom it captured; the verdict of Done-when 3."""
    if not paired:
        return []
    lines = [
        f"Paired over the same {paired['heldout_mrs']} held-out merge requests (95% paired bootstrap intervals,"
        f" sign-flip p). References from the headroom run, measured before training: rule plan"
        f" {paired['rule_mean']:+.3f}, oracle {paired['oracle_mean']:+.3f}, oracle − rule"
        f" {paired['gap_oracle_minus_rule']:+.3f} [{paired['gap_interval'][0]:+.3f}, {paired['gap_interval'][1]:+.3f}]."
        " Captured share = (stage − rule) / (oracle − rule)."
        + (
            f" Best fixed rule (chosen on the training MRs: {paired['best_fixed_rule']})"
            f" {paired['best_fixed_mean']:+.3f}:"
            " a stage above it has learned more than one MR-independent habit."
            if "best_fixed_mean" in paired
            else ""
        ),
        "",
        "| stage | mean | − rule | − best fixed rule | − base | − previous stage | captured share |",
        "|---|---:|---|---|---|---|---:|",
    ]
    for stage, e in paired.get("stages", {}).items():
        captured = "" if e.get("captured_share") is None else f"{e['captured_share']:.0%}"
        lines.append(
            f"| {stage} | {e['mean']:+.3f} | {_pair(e.get('paired_vs_rule'))} | {_pair(e.get('paired_vs_best_fixed'))}"
            f" | {_pair(e.get('paired_vs_base'))} | {_pair(e.get('paired_vs_previous'))} | {captured} |"
        )
    rl = paired.get("stages", {}).get("rl")
    if rl:
        share, lo = rl.get("captured_share") or 0.0, rl["paired_vs_rule"]["lo"]
        met = share >= 0.3 and lo > 0
        lines += [
            "",
            f"**Done-when 3: RL captured {share:.0%} of the oracle − rule gap (target ≥ 30%), its paired interval"
            f" against the rule starts at {lo:+.3f} (target > 0): {'met' if met else 'not met'}.**",
        ]
    lines.append("")
    return lines


def decoding_lines(decoding: Mapping[str, Any] | None) -> list[str]:
    """Issue 24, Build 5: the cost of a plan decoded token by token and by jump-forward."""
    if not decoding:
        return []
    lines = [
        "",
        f"Decoding cost per plan (the base model's greedy plans on {decoding['token by token']['plans']} held-out"
        f" MRs, load {decoding.get('load', '?')}): token by token is `generate` under the schema's logits"
        " processor, which reads the ~1,300-token prompt again and then runs a pass per token; jump-forward reads"
        " the prompt from the prompt cache and runs a pass per choice. The same plan both ways on"
        f" {decoding['same_plan']} of them (jump-forward tokenizes the forced text on its own).",
        "",
        "| decoding | tokens per plan | forward passes per plan | seconds per plan | valid plans |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("token by token", "jump-forward"):
        d = decoding[name]
        lines.append(
            f"| {name} | {d['tokens_per_plan']:.0f} | {d['forward_passes_per_plan']:.1f} |"
            f" {d['seconds_per_plan']:.2f} | {d['valid']} of {d['plans']} |"
        )
    return lines
