"""Rules whose findings were mostly wrong on real code nobody had tuned them to.

`python -m bench.history` reviews real open-source history, and every finding it would post is judged
by hand (`bench/history_judgements.json`). The judgements that count here are those made on a
held-out set at first sight: five repositories no rule had seen, run once and judged before anything
was changed because of them. That is the best estimate we have of how a rule does on a project it
meets for the first time, which is what every new installation is. The tally per rule is generated
from the judgements into `track_record.json` beside this module (`python -m bench.history
--track-record`); a test keeps the two in step.

A rule judged at least `MIN_JUDGED` times, on at least `MIN_COMMITS` commits, and right in fewer than
`MIN_RIGHT_SHARE` of them goes to NEEDS_HUMAN_REVIEW: listed for a person in the summary, not posted
as a thread. The record is a rule's latest `bench.history.RECORD_WINDOW` judged findings (40): rules
are fixed as their wrong shapes are found, and the latest batches describe the rule as it is now.
`MIN_RIGHT_SHARE` is the precision the product promises for what it posts (issue 22: at least 70 %
of posted findings right on real history). A rule whose own record is below it would pull every
review's threads below it: a bare `except:` was right in 8 of 23 posted findings on batch D
(2026-11-27), debatable in 13 — true, but mostly a deliberate catch-all nobody needed a thread for.
Its findings are still listed, with their reason, for a person to read.

On held-out sets, the structural rules (deleted tests, untested code, stale test constants, new import
cycles, removed symbols) were right in 5 of 122 findings (fifteen sets); a careful colleague does not
say what is wrong 23 times in 24. Fixing the shapes each set showed did not carry to the next set, so
the record stands until people say otherwise: when at least `feedback.MIN_PEOPLE` people on this
project have accepted the rule's findings and more people accepted than rejected them, the
project has vouched for it and it posts again.

A critical finding (a vendor's key, a private key in product code) always posts: missing one costs
far more than one wrong thread, and its rule's record may come from a different, milder shape.

A ruff rule judged too seldom to have a record of its own is judged by its family's (`record_of`): pylint's
errors (`ruff:PLE*`), pyflakes (`ruff:F*`), bugbear (`ruff:B*`) each taken together.

A rule that was fixed after its record was taken keeps the record until new held-out judgements move
it; that is the price of a record that cannot be argued with by the fix's author. A rule seldom judged
(fewer than `MIN_JUDGED` findings, or all on one commit, where they share one cause and are one
observation more than three) keeps posting: too little is known to hold it back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agent.verdicts.feedback import MIN_PEOPLE, PeopleVotes
from reviewers.kernel.contracts import Finding

TRACK_RECORD = Path(__file__).with_name("track_record.json")
MIN_JUDGED = 3  # fewer judged findings say too little about a rule to hold it back
MIN_COMMITS = 2  # findings of one commit share a cause: they are not independent evidence
MIN_RIGHT_SHARE = 0.7  # the share of posted findings the product promises right (issue 22, Done-when 2)
HELD_BY_RECORD = "findings judged on open-source history"  # in the reason of every finding held back here


@dataclass(frozen=True)
class Record:
    """A rule's findings judged on held-out history at first sight."""

    right: int
    debatable: int
    wrong: int
    commits: int  # how many commits the judged findings came from

    @property
    def judged(self) -> int:
        return self.right + self.debatable + self.wrong


def load_track_record(path: Path = TRACK_RECORD) -> dict[str, Record]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {rule: Record(**counts) for rule, counts in raw["rules"].items()}


@cache
def shipped_track_record() -> Mapping[str, Record]:
    return load_track_record()


# ruff's rule families: pyflakes (F), bugbear (B), pylint's errors (PLE), pycodestyle (E), bandit's port (S).
_RUFF_FAMILY = re.compile(r"^ruff:(?P<family>[A-Z]+)\d+$")


def ruff_family(rule: str) -> str | None:
    """The family a ruff rule belongs to (`ruff:PLE2515` → `ruff:PLE*`), or None."""
    found = _RUFF_FAMILY.match(rule)
    return f"ruff:{found.group('family')}*" if found else None


def enough(record: Record | None) -> bool:
    return record is not None and record.judged >= MIN_JUDGED and record.commits >= MIN_COMMITS


def record_of(rule: str, records: Mapping[str, Record]) -> tuple[str, Record] | None:
    """What held-out history says of a rule: its own record when it was judged enough, else its ruff
    family's (every rule of the family together), else the little its own says, else nothing.

    A ruff rule nobody has judged yet is most like its siblings: pylint's errors were right in about
    a quarter of the findings judged on held-out history, each new code among them no better so far
    (PLE0302, PLE1205, PLE0704, PLE1142), so `PLE2515` meeting its first project is judged by its family.
    Other analyzers' rules are not grouped: a taint rule's sink class is its own question."""
    own = records.get(rule)
    if own is not None and enough(own):
        return rule, own
    family = ruff_family(rule)
    if family is not None:
        members = [r for name, r in records.items() if ruff_family(name) == family]
        together = Record(
            right=sum(r.right for r in members),
            debatable=sum(r.debatable for r in members),
            wrong=sum(r.wrong for r in members),
            commits=sum(r.commits for r in members),
        )
        if enough(together):
            return family, together
    return (rule, own) if own is not None else None


def poor_record(record: Record | None) -> bool:
    return (
        record is not None
        and record.judged >= MIN_JUDGED
        and record.commits >= MIN_COMMITS
        and record.right < MIN_RIGHT_SHARE * record.judged
    )


def accepted_by_people(rule: str, votes: PeopleVotes) -> bool:
    down, up = votes.by_rule.get(rule, (0, 0))
    return up >= MIN_PEOPLE and up > down


def unproven_rule(finding: Finding, votes: PeopleVotes, record: Mapping[str, Record] | None = None) -> str | None:
    """Why the finding goes to a person rather than a thread (its rule's held-out record), or None."""
    if finding.severity == "critical":
        return None
    known = record_of(finding.rule, shipped_track_record() if record is None else record)
    if known is None or not poor_record(known[1]) or accepted_by_people(finding.rule, votes):
        return None
    name, found = known
    debatable = f", {found.debatable} debatable" if found.debatable else ""
    whose = finding.rule if name == finding.rule else f"{finding.rule}'s family ({name})"
    return (
        f"{whose} was right in {found.right} of {found.judged} {HELD_BY_RECORD} it had"
        f" not been tuned to{debatable}; listed for a person until {MIN_PEOPLE} people on this project accept it"
    )


# --- what is listed must be worth a look (issue 39, item 6) -----------------------------------------
# A person's attention is a budget too. A rule whose listed findings were right or debatable in fewer
# than half of its judged ones on held-out history (`MIN_WORTH_A_LOOK`) is no longer listed finding by
# finding: its findings collapse into one counted line of the summary ("12 more from 3 rules that are
# usually wrong here; `--all` shows them"), never dropped — `reviewloop review --all` and the JSON
# report's `folded` entry show them. Not folded: a critical or high finding (issue 40, H2: a high shell
# injection held for a person stays named in the merge request's summary, which no `--all` reaches),
# a rule this project's people accepted, and request data reaching a sink as the taint engine found
# it (high confidence):
# a listed zip slip or SSRF from a request is what a security reviewer reads first, and its record
# is mostly other shapes (data of unknown origin, a segment the router keeps to one component) that
# the engine now tells apart.
MIN_WORTH_A_LOOK = 0.5
USUALLY_WRONG = "usually wrong here"  # in the reason of every finding folded into the summary's count
NEVER_FOLDED = frozenset({"critical", "high"})  # severities always listed by name


@cache
def taint_sink_rules() -> frozenset[str]:
    from reviewers.analyzers.flow.rules import SINKS

    return frozenset(s.rule for s in SINKS.values())


def worth_a_look(record: Record) -> bool:
    return record.right + record.debatable >= MIN_WORTH_A_LOOK * record.judged


def usually_wrong(finding: Finding, votes: PeopleVotes, record: Mapping[str, Record] | None = None) -> str | None:
    """Why a listed finding is folded into the summary's count rather than listed on its own, or None.
    `record`: rule → held-out record (None: the shipped one; empty: folding is off)."""
    if finding.severity in NEVER_FOLDED or accepted_by_people(finding.rule, votes):
        return None
    if finding.confidence == "high" and finding.rule in taint_sink_rules():
        return None  # request data reaching a sink (`reviewers.analyzers.flow`)
    known = record_of(finding.rule, shipped_track_record() if record is None else record)
    if known is None or not enough(known[1]) or worth_a_look(known[1]):
        return None
    name, found = known
    return (
        f"{USUALLY_WRONG}: {name} was right or debatable in {found.right + found.debatable} of {found.judged} "
        f"{HELD_BY_RECORD}; counted in the summary, shown with --all"
    )


def folded(reason: str) -> bool:
    """Whether a verdict's reason says the finding was folded into the summary's count."""
    return USUALLY_WRONG in reason


def folded_line(rules_of_folded: list[str]) -> str | None:
    """The summary's one line for the folded findings, or None when there are none."""
    if not rules_of_folded:
        return None
    rules = len(set(rules_of_folded))
    return (
        f"{len(rules_of_folded)} more from {rules} rule{'s' if rules != 1 else ''} that "
        f"{'are' if rules != 1 else 'is'} usually wrong here; `--all` shows them"
    )
