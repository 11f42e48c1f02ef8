"""The strategy prompt s1: the one renderer for serving, shadows, training, the gate and RL.

What a model is trained on must be what it is served with (issue 24: training once rendered title,
description and one line per file while serving rendered config, history and a first-hunk overview,
so the model was trained on one prompt and served another). Every caller passes the same values —
the merge request's words, its changed files, the repository config, the project's feedback history
and the review budget — and gets the same bytes.

The diff part is an added-lines excerpt of at most `S1_EXCERPT_LINES` lines that covers every
changed file: each file's header first, then the files' added lines dealt round-robin, one per file
per round, so no file is crowded out by a big neighbour. Within a file, lines that carry a risk
signal (`agent.risk.SIGNALS`: SQL, shell, deserialisation, ...) come first, then the rest in order;
blank lines are skipped. Nothing here describes what a file is for: a merge request's own
description is the only such text, as in production.

Everything in s1 that came from the merge request or the repository is fenced as data (issue 40):
the title and description, the added lines and their files' headers, the repository's layer names,
the paths of the feedback history; a path is escaped onto its line (`one_line`: GitLab allows a
newline in a path, which would otherwise start a line of the prompt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.risk import ANY_SIGNAL
from reviewers.kernel.contracts import DiffLine, FileChange, RepoConfig, one_line
from reviewers.paths import language_of
from reviewers.prompts import untrusted

S1_EXCERPT_LINES = 60  # keeps s1 within a small model's context next to the system prompt
S1_MAX_HISTORY = 10  # paths and rules of history shown (the most voted first)
EXCERPT_LINE_CHARS = 120
TEXT_LIMIT = 1200


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _added_in_reading_order(change: FileChange) -> list[DiffLine]:
    """The added lines, those showing a risk signal first."""
    added = [ln for h in change.hunks for ln in h.lines if ln.kind == "add" and ln.text.strip()]
    risky = [ANY_SIGNAL.search(ln.text) is not None for ln in added]
    return [ln for ln, r in zip(added, risky, strict=True) if r] + [
        ln for ln, r in zip(added, risky, strict=True) if not r
    ]


def _file_header(change: FileChange) -> str:
    lang = language_of(change.path) or "text"
    return f"{change.status} {one_line(change.path)} [{lang}] +{change.additions} -{change.deletions}"


def added_lines_excerpt(files: Sequence[FileChange], *, max_lines: int = S1_EXCERPT_LINES) -> str:
    """At most `max_lines` lines: every file's header (while they fit), then added lines round-robin."""
    if max_lines < 1:
        raise ValueError("max_lines must be at least 1")
    shown = list(files)
    note = ""
    if len(shown) > max_lines:
        keep = max_lines - 1
        rest = shown[keep:]
        adds, dels = sum(r.additions for r in rest), sum(r.deletions for r in rest)
        note = f"… {len(rest)} more files not shown (+{adds} -{dels})"
        shown = shown[:keep]
    queues = [_added_in_reading_order(f) for f in shown]
    picked: list[list[DiffLine]] = [[] for _ in shown]
    room = max_lines - len(shown) - (1 if note else 0)
    depth = 0
    while room > 0 and any(depth < len(q) for q in queues):
        for i, queue in enumerate(queues):
            if room > 0 and depth < len(queue):
                picked[i].append(queue[depth])
                room -= 1
        depth += 1
    out: list[str] = []
    for change, lines in zip(shown, picked, strict=True):
        out.append(_clip(_file_header(change), EXCERPT_LINE_CHARS))
        for ln in sorted(lines, key=lambda d: d.new_line or 0):
            out.append(_clip(f"{ln.new_line}: +{ln.text}", EXCERPT_LINE_CHARS))
    if note:
        out.append(note)
    return "\n".join(out)


def render_s1(
    *,
    title: str,
    description: str,
    files: Sequence[FileChange],
    config: RepoConfig | None = None,
    history: Mapping[str, float] | None = None,
    rule_votes: Mapping[str, tuple[int, int]] | None = None,
    review_budget: int | None = None,
) -> str:
    """The state s1 the strategy is conditioned on: compact, deterministic, no secrets added.

    `history` is the project's accepted share per changed path; `rule_votes` maps a kind of finding
    (`agent.finding_kinds.vote_key`: the kind of defect, else the analyzer rule) to the people who
    voted it up and down on this project; `review_budget` is the review's total reviewer steps (one
    file per step; serving: the repository's `review_budget`), None when the review sets none. The merge
    request's own words and diff are fenced as data: text in the change that says "plan nothing"
    must not plan the review.
    """
    config = config or RepoConfig()
    mr_text = f"title: {_clip(title, 200)}\ndescription: {_clip(description, TEXT_LIMIT) or '(none)'}"
    parts = [untrusted("merge request", mr_text)]
    parts.append(f"files ({len(files)}, +{sum(f.additions for f in files)} -{sum(f.deletions for f in files)}):")
    parts.append(f"config: reviewers {', '.join(config.reviewers)}; min severity {config.min_severity}")
    if config.layers:  # names from the repository's configuration: its text, fenced like the rest
        rules = "; ".join(f"{lr.name} may import {', '.join(lr.may_import) or 'nothing'}" for lr in config.layers)
        parts.append(untrusted("layers", one_line(rules)))
    if review_budget is None:
        parts.append("review budget: none set (each reviewer's step budget is the plan's)")
    else:
        parts.append(f"review budget: {review_budget} reviewer steps in all, one file per step")
    if history:
        hist = ", ".join(f"{one_line(p)} {rate:.0%}" for p, rate in sorted(history.items())[:S1_MAX_HISTORY])
        parts.append(untrusted("accepted-rate history by path", hist))
    if rule_votes:
        ranked = sorted(rule_votes.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))[:S1_MAX_HISTORY]
        parts.append("team votes by kind (up/down): " + ", ".join(f"{k} +{up}/-{down}" for k, (up, down) in ranked))
    if files:
        parts.append(untrusted("added lines", added_lines_excerpt(files)))
    return "\n".join(parts)
