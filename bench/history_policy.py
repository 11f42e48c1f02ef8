"""`python -m bench.history_policy`: a posting policy learned from real judged history, paired by merge
request with today's hand-set posting rule on held-out repositories (issue 41, item 3).

    python -m bench.history_policy [--no-record]

The environment and the two policies are `learning.posting_policy`. The split is by repository
(a stable hash of its name, 40 % held out); every policy learns from the training repositories'
judgements only and is measured on the held-out ones, paired MR by MR (bootstrap interval,
sign-flip p). References on the same MRs: post everything, post nothing, and the oracle (post exactly
the right findings). No model, a second of CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from learning.paired_stats import paired_difference
from learning.posting_policy import (
    DEFAULT_LISTED_RIGHT_COST,
    Judged,
    PolicyResult,
    evaluate,
    learned_policy,
    parse_judgements,
    record_policy,
    split_by_repository,
)

ROOT = Path(__file__).resolve().parent.parent
JUDGEMENTS = ROOT / "bench" / "history_judgements.json"


def run(judgements: Path = JUDGEMENTS) -> dict[str, object]:
    items = parse_judgements(json.loads(judgements.read_text(encoding="utf-8")))
    train, held = split_by_repository(items)
    policies = {
        "today's rule (track record)": record_policy(train),
        "learned (shrunk rule estimates)": learned_policy(train),
        "post everything": lambda f: True,
        "post nothing": lambda f: False,
        "oracle (post the right ones)": lambda f: f.verdict == "right",
    }
    results = {name: evaluate(p, held) for name, p in policies.items()}
    mrs = sorted({f.mr for f in held})

    def rewards(r: PolicyResult) -> list[float]:
        return [r.per_mr.get(m, 0.0) for m in mrs]

    today = rewards(results["today's rule (track record)"])
    learned = rewards(results["learned (shrunk rule estimates)"])
    return {
        "train": {"findings": len(train), "repos": len({f.repo for f in train}), "mrs": len({f.mr for f in train})},
        "held_out": {"findings": len(held), "repos": len({f.repo for f in held}), "mrs": len(mrs)},
        "policies": {
            name: {
                "mean_reward_per_mr": round(sum(rewards(r)) / len(mrs), 4),
                "posted": r.posted,
                "right_posted": r.right_posted,
                "wrong_posted": r.wrong_posted,
                "right_listed": r.right_listed,
                "right_share": None if r.right_share is None else round(r.right_share, 4),
            }
            for name, r in results.items()
        },
        "learned_minus_today": paired_difference(learned, today).as_dict(),
        "listed_right_cost": DEFAULT_LISTED_RIGHT_COST,
    }


def render(result: dict[str, object]) -> str:
    held = result["held_out"]
    train = result["train"]
    lines = [
        "## Posting policy learned from judged history (held-out repositories)",
        "",
        f"`python -m bench.history_policy`: {train['findings']} judged findings of {train['repos']} repositories "  # type: ignore[index]
        f"to learn from; measured on {held['findings']} findings of {held['repos']} other repositories "  # type: ignore[index]
        f"({held['mrs']} merge requests). Reward per MR: +1 right posted, −1 wrong posted, "  # type: ignore[index]
        f"−{result['listed_right_cost']} right only listed. Judgement keys carry no severity (today's rule "
        "always posts a critical finding) and no diff (no s1: the policy reads the rule and the path only).",
        "",
        "| policy | reward per MR | posted | right | wrong | right share | right only listed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, p in result["policies"].items():  # type: ignore[attr-defined]
        share = "—" if p["right_share"] is None else f"{p['right_share']:.0%}"
        lines.append(
            f"| {name} | {p['mean_reward_per_mr']:+.3f} | {p['posted']} | {p['right_posted']} | "
            f"{p['wrong_posted']} | {share} | {p['right_listed']} |"
        )
    d = result["learned_minus_today"]
    lines += [
        "",
        f"Learned − today's rule, paired by MR: {d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}], "  # type: ignore[index]
        f"sign-flip p = {d['p']:.4f}.",  # type: ignore[index]
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history_policy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-record", action="store_true", help="print only; do not record in bench/RESULTS.md")
    args = parser.parse_args(argv)
    result = run()
    section = render(result)
    print(section)
    print(json.dumps(result, separators=(",", ":")))
    if not args.no_record:
        from bench.results_file import record_run

        d = result["learned_minus_today"]
        learned = result["policies"]["learned (shrunk rule estimates)"]  # type: ignore[index]
        today = result["policies"]["today's rule (track record)"]  # type: ignore[index]
        headline = (
            f"held-out repos: learned posts {learned['right_posted']} right at {learned['right_share']:.0%} vs today's "
            f"{today['right_posted']} at {today['right_share']:.0%}; reward/MR learned − today "
            f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"  # type: ignore[index]
        )
        record_run(
            name="history-policy",
            title=section.splitlines()[0].removeprefix("## "),
            headline=headline,
            section=section,
        )
    return 0


__all__ = ["Judged", "main", "render", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
