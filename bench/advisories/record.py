"""Record a bench.advisories or bench.bugs run in bench/RESULTS.md (through bench.results_file).

    python -m bench.advisories.record --bench advisories --dev dev.json --heldout heldout.json \
        --notes notes.md --out bench/advisories/results.json

Joins the development and held-out runs' JSON (`python -m bench.advisories --json FILE`), writes them
together as one JSON file, and records one section: both parts' tables, the held-out measurement
count, the sources and the notes given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.advisories.run import CaseResult, render, summarize
from bench.results_file import record_run


def _share(cell: dict[str, Any]) -> str:
    return f"{100 * cell['share']:.0f} %" if cell.get("of") else "-"


def headline(bench: str, summary: dict[str, Any], dev: dict[str, Any] | None) -> str:
    r = summary["recall"]
    fx = summary["fix_direction"]
    text = (
        f"held-out {summary['cases']} cases / {summary['projects']} projects: reviewloop posted "
        f"{_share(r['reviewloop-posted'])}, listed or posted {_share(r['reviewloop-listed'])}, any verdict "
        f"{_share(r['reviewloop-any'])}"
    )
    if "bandit" in r:
        text += f"; bandit {_share(r['bandit'])}, semgrep {_share(r['semgrep'])}"
    if bench == "advisories":
        text += f"; fix direction: security threads on {fx['cases_with_security_thread']} of {summary['cases']}"
    else:
        text += f"; fix direction: threads on {fx.get('cases_with_thread', '?')} of {summary['cases']}"
    if dev is not None:
        text += f" (development {dev['cases']} cases: any verdict {_share(dev['recall']['reviewloop-any'])})"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.advisories.record", description=__doc__.split("\n")[0])
    parser.add_argument("--bench", choices=("advisories", "bugs"), default="advisories")
    parser.add_argument("--dev", type=Path)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--notes", type=Path, required=True, help="markdown: method, sources, what it means")
    parser.add_argument("--out", type=Path, required=True, help="the joined JSON file")
    parser.add_argument("--machine", default="AMD EPYC, 2-core CPU shared with other work")
    args = parser.parse_args(argv)
    security_only = args.bench == "advisories"
    parts: dict[str, dict[str, Any]] = {}
    for part, path in (("heldout", args.heldout), ("dev", args.dev)):
        if path is None:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        results = [CaseResult(**c) for c in data["cases"]]
        data["summary"] = summarize(results, security_only=security_only)
        parts[part] = data
    args.out.write_text(json.dumps(parts, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    held = parts["heldout"]
    title = {
        "advisories": "Published security fixes reverted (bench.advisories)",
        "bugs": "BugsInPy bugs reverted (bench.bugs)",
    }[args.bench]
    when = str(held.get("started", ""))[:16].replace("T", " ")
    section = [f"## {when} UTC · {title}", "", args.notes.read_text(encoding="utf-8").strip(), ""]
    section.append(render(held["summary"], title=f"Held-out part ({held['title']}, measured once)"))
    if "dev" in parts:
        section.append(render(parts["dev"]["summary"], title=f"Development part ({parts['dev']['title']})"))
    record_run(
        name=f"bench-{args.bench}",
        title=title,
        headline=headline(args.bench, held["summary"], parts.get("dev", {}).get("summary")),
        section="\n".join(section),
        commit=str(held.get("code_commit", "")) or None,
        machine=args.machine,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
