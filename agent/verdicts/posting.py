"""Which rules post a thread by default: a rule earns its voice.

On held-out sets of open-source repositories (`python -m bench.history --held-out`, every
finding judged by hand in `bench/history_judgements.json`), posted findings were right 29 %, 44 %,
0 %, 25 %, 12 % and 17 % of the time on the six sets run after the track record existed, against a
goal of 70 %. Fixing the shapes one set showed did not carry to the next, and holding back the rules
with a poor record (`agent.verdicts.track_record`) only removes what has already failed. A rule
nobody has judged on unseen code is, on that history, more likely wrong than right, so the default
turns around: a rule posts only with evidence that it is right on code it was not tuned on, and
everything else is listed for a person in the summary (NEEDS_HUMAN_REVIEW, with its CWE), never
dropped. `Settings.posting = "all"` (REVIEWLOOP_POSTING=all) restores posting every rule that no
record holds back.

A finding posts under "proven" when

- it is critical (a vendor's key, a private key in product code): missing one costs far more than
  one wrong thread, as in `track_record`;
- its rule is proven: judged at least `MIN_JUDGED` times on held-out sets at first sight, on at
  least `MIN_COMMITS` commits, and right in at least `MIN_RIGHT_SHARE` of them;
- its rule reports code that is broken as written (`BROKEN_AS_WRITTEN`, each with its reason): the
  defect is in the text itself, not in a guess about intent, the framework or where data comes from;
  for F821, only a name the module binds nowhere and cannot receive (`unbound_name`); hygiene rules
  (an unused import, a bare `except:`) not in example, demo or documentation code (`SAMPLE_HYGIENE`);
- it is an injection finding of a taint rule (`injection_taint`): request data reaching an SQL,
  command, code-execution or deserialization sink. Our security suite measures those right
  (`bench.security_suite`), the damage is the server's, and held-out history has too few of them
  to judge either way; a sink reached only by data of unknown origin is low confidence and already
  goes to a person;
- it reports a guard the change took away in front of a call that remains (`removed_guard`): the
  change itself is the evidence, the base line is quoted, and a guard that moved and still
  dominates the call is not reported (`reviewers.analyzers.guard_removal`);
- the project's own configuration states the rule (`PROJECT_RULES`): its people wrote it;
- the project's people vouched for the rule (`track_record.accepted_by_people`: `MIN_PEOPLE`
  people accepted its findings, more than rejected them).

A model's findings (rule "llm") are outside this module: they have no rule to hold a record, and
earn their voice through agreement across strategies, the model's own judgment and the calibration
of their reviewer by people (`agent.verifier`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Literal

from agent.verdicts.feedback import MIN_PEOPLE, PeopleVotes
from agent.verdicts.track_record import (
    MIN_COMMITS,
    MIN_JUDGED,
    MIN_RIGHT_SHARE,
    Record,
    accepted_by_people,
    record_of,
    shipped_track_record,
)
from reviewers.kernel.contracts import Finding
from reviewers.paths import is_migration_path, is_sample_path, is_stub_path

Posting = Literal["proven", "all"]
POSTING_MODES: tuple[Posting, ...] = ("proven", "all")
HELD_BY_TIER = "not yet proven on code it was not tuned on"  # in the reason of every finding listed here
MODEL_RULES = frozenset({"", "llm"})

# Defects in the text itself: true wherever the rule fires on a line the change added, whatever the
# project, and the verifier already keeps only those (`agent.verdicts.unchanged`, `preexisting`).
# How each did on held-out history is in `track_record.json`, generated from the judgements; the
# reasons here say why the text is broken, not how often, so they cannot go stale.
BROKEN_AS_WRITTEN: dict[str, str] = {
    "ruff:invalid-syntax": "the file does not parse: nothing in it can be imported or run",
    "ruff:F811": "a name bound again before its first binding was used: one of the two is dead code or a "
    "mistaken overwrite",
    "ruff:F401": "an import the change added and nothing uses: ruff's safe fix removes it",
    "ruff:B012": "return, break or continue in `finally` silently discards the exception in flight",
    "ruff:E722": "a bare `except:` also catches KeyboardInterrupt and SystemExit, so the program cannot be "
    "stopped where it runs",
    # the slips a change writes (`reviewers.analyzers.slips`), each reported only where its rule's
    # fixtures show the shape is not written on purpose; a mutated default is listed (sharing can be meant)
    "slips:missing-comma": "two adjacent string literals in a list of strings become one element",
    "slips:logging-args": "the logger's own formatting drops an argument or fails on the record",
    "slips:unraised-exception": "an exception built as a statement of its own is never raised",
    "slips:constant-comparison": "a condition the text alone decides tests nothing",
    # `reviewers.analyzers.callers`: reported only where imports resolve to one file of the repository
    "calls:broken-caller": "a call or import at head that the changed definition no longer accepts: a TypeError, "
    "ImportError or AttributeError when it runs",
}
# ruff's pylint errors (PLE) are errors Python raises or code that cannot do what it says (`return`
# in `__init__`, `await` outside `async`, a special method with the wrong signature) — except these,
# whose verdict needs what only the running program knows, so ruff guesses:
UNDECIDED_PLE: dict[str, str] = {
    "PLE0704": "a bare `raise` in a helper that its callers run inside their `except` blocks re-raises the "
    "exception being handled; ruff cannot see the callers",
    "PLE0605": "`__all__` extended from another module's list, which ruff does not read",
    "PLE0643": "an index past a literal's end only where ruff cannot see the literal change",
    "PLE1141": "iterating a dict without `.items()` needs the value's type, which ruff infers",
    "PLE1507": "an `os.getenv` argument's type, which ruff infers",
}
# Rules that exist because the project wrote them down (`.reviewloop.toml` `[[layers]]`).
PROJECT_RULES = frozenset({"layers:forbidden-import"})
# Guards a change took away, each finding quoting the removed base line (issue 39).
REMOVED_GUARD_RULES = frozenset({"python:removed-guard"})
# The injection classes a taint rule reports when request data reaches the sink.
INJECTION_CWES = frozenset({"CWE-89", "CWE-78", "CWE-94", "CWE-502"})
_INJECTION_CLASSES = ("sql", "command", "code", "deserialization")  # reviewers.analyzers.flow.rules.SINKS


# ruff's F821 (an undefined name) is held back by its record (mostly names a module receives in ways
# ruff does not follow: a Python 2 builtin, a string annotation, Sphinx's conf.py namespace). The
# analyzer says high confidence only for the shape left: a name the product module binds nowhere
# and has no way to receive (`reviewers.analyzers.ruff.unbound_anywhere`).
UNBOUND_NAME = (
    "a name the module binds nowhere and cannot receive (no star import, module `__getattr__` or namespace "
    "write): NameError when the line runs"
)


def unbound_name(finding: Finding) -> str | None:
    """Why an F821 finding is broken as written, or None."""
    return UNBOUND_NAME if finding.rule == "ruff:F821" and finding.confidence == "high" else None


# Hygiene in code written for readers to copy (`reviewers.paths.is_sample_path`: an example project, a
# demo, docs), written by a tool from its template (`reviewers.paths.is_migration_path`: a schema
# migration) or never run (`is_stub_path`: a `.pyi` type stub, whose unused imports type checkers
# ignore): true, but an unused import or a bare `except:` there is not worth a thread. A demo or a
# migration that does not parse, or names what is not there, is still broken as written.
SAMPLE_HYGIENE = frozenset({"ruff:F401", "ruff:F811", "ruff:E722", "ruff:B012"})
SAMPLE_HYGIENE_REASON = (
    "hygiene in example, demo, documentation, type-stub or generated migration code; listed for a person, not posted"
)


def listed_by_tier(reason: str) -> bool:
    """Whether a verdict's reason says the posting tier listed the finding rather than posted it."""
    return HELD_BY_TIER in reason or SAMPLE_HYGIENE_REASON in reason


def sample_hygiene(finding: Finding) -> bool:
    """An unused import or a bare `except:` in example code, a type stub or a generated migration."""
    path = finding.path
    return finding.rule in SAMPLE_HYGIENE and (is_sample_path(path) or is_migration_path(path) or is_stub_path(path))


def broken_as_written(rule: str) -> str | None:
    """Why a finding of this rule is a defect in the text itself, or None."""
    if rule in BROKEN_AS_WRITTEN:
        return BROKEN_AS_WRITTEN[rule]
    code = rule.removeprefix("ruff:")
    if code != rule and code.startswith("PLE") and code not in UNDECIDED_PLE:
        return "a pylint error: Python raises it, or the code cannot do what it says"
    return None


@cache
def taint_rules() -> frozenset[str]:
    """The taint rules of the injection classes: the Python data-flow engine's and our semgrep rules'."""
    from reviewers.analyzers.flow.rules import SINKS
    from reviewers.analyzers.semgrep_taint import load_rules

    engine = {r.name for r in load_rules()[1].values() if r.taint and r.cwe in INJECTION_CWES}
    return frozenset({SINKS[c].rule for c in _INJECTION_CLASSES} | engine)


def injection_taint(finding: Finding) -> bool:
    """Request data reaching an injection sink, as a taint rule found it. The Python engine says high
    confidence only when the data is the request's (unknown origin and the command line are low);
    semgrep's taint rules report only flows from their sources."""
    return finding.cwe in INJECTION_CWES and finding.confidence == "high" and finding.rule in taint_rules()


def removed_guard(finding: Finding) -> bool:
    """A guard, sanitizer or hardening option the change removed in front of a call it keeps."""
    return finding.rule in REMOVED_GUARD_RULES and finding.confidence == "high"


def proven(record: Record | None) -> bool:
    return (
        record is not None
        and record.judged >= MIN_JUDGED
        and record.commits >= MIN_COMMITS
        and record.right >= MIN_RIGHT_SHARE * record.judged
    )


def unearned_voice(finding: Finding, votes: PeopleVotes, record: Mapping[str, Record] | None = None) -> str | None:
    """Why the finding is listed for a person rather than posted as a thread under posting="proven",
    or None when it has earned a thread. `record`: rule → held-out record (None: the shipped one)."""
    rule = finding.rule
    if finding.severity == "critical" or rule in MODEL_RULES:
        return None
    known = record_of(rule, shipped_track_record() if record is None else record)
    found = known[1] if known is not None else None
    hygiene = sample_hygiene(finding)
    # F821's record mixes its two shapes and is mostly the high-confidence one (a name bound nowhere),
    # so it proves nothing about a name the module may receive (medium confidence)
    mixed = rule == "ruff:F821" and finding.confidence != "high"
    if (
        (not hygiene and ((proven(found) and not mixed) or broken_as_written(rule)))
        or unbound_name(finding)
        or rule in PROJECT_RULES
        or injection_taint(finding)
        or removed_guard(finding)
        or accepted_by_people(rule, votes)
    ):
        return None
    if hygiene:
        return f"{rule}: {SAMPLE_HYGIENE_REASON}"
    seen = (
        f"right in {found.right} of {found.judged} findings judged on open-source history"
        if found is not None
        else "never judged on open-source history"
    )
    return (
        f"{rule} is {HELD_BY_TIER} ({seen}); listed for a person, not posted, until it is proven there or "
        f"{MIN_PEOPLE} people on this project accept it"
    )
