"""What a change takes away: a guard on the path to a sink that the change removed or weakened.

Both versions of a changed Python file are read (`protections.ModuleScan`): each call with the
guards that dominate it. A guard of the base that stood in front of a call the head still makes
(the same callee, on the same arguments or the same names, in the same function), where at head no
guard of the same kind — or, for a check, any guard of the sink's class — dominates that call, is a
finding: the change itself is the evidence, whether the sink line changed or not and whether the
data's origin is known or not. Its body quotes the base line that was removed or weakened.

Counted as removed: a check deleted (of a known family, or any early exit decided by a value's
content: `checks`), a sanitizer dropped, a hardening option switched off (`shell=True`,
`verify=False`, `allow_pickle=True`, `resolve_entities` left to lxml's default, `autoescape` off,
also through a spread dict, `yaml.safe_load` → `yaml.load`, `hmac.compare_digest` → `==`,
`json.loads` → `pickle`/`marshal`/`dill.loads`, an SSL context no longer given to a standard-library
TLS client, the `--` that ended a command's options), an authentication or permission decorator,
check, mixin or DRF permission class dropped from a view (a function view or a class-based one) or
from any function that refused its caller, `csrf_exempt` added or `CSRFProtect` removed, a
sandbox's attribute check, a credential header no longer stripped, a size limit dropped, a validator
run on every member in a loop before an extraction dropped, a pattern loosened (an anchor or
`fullmatch` gone, a character class widened to `.*`); a check weakened (`and` → `or`) or moved after
the call; a validator replaced by a repository function whose body does not do the job.

A call to a repository function whose summary sends a parameter to a sink is a sink of that class
(`helpers`); one that refuses that parameter on a check of its own holds the guard itself.

Not counted: a guard that moved and still dominates the call at head (into a helper called first,
one that raises on the content of what it is given, a decorator, a `before_request` hook, a
sanitizer applied earlier or inside a helper), a guard replaced by another that protects the same
class (`secure_filename` → a containment check), a call the change removed or now feeds with
constants only, a call whose twin already ran without the guard at the base, `verify=False` inside
an `if` (the caller's opt-out), and an `if` on the user whose exiting branch answers rather than
refuses (`if is_staff: return everything`).

What this does not catch: a guard moved into another file's middleware configuration (Django's
`MIDDLEWARE`), a function renamed together with its guard's removal (scopes are matched by name),
guards in code the head reaches only through another module, a guard that only an unchanged line
held when the change touched neither it nor the call, and a change that makes the head pass a
different value past an intact check.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.flow.project import Project, build_module
from reviewers.analyzers.flow.rules import SINKS
from reviewers.analyzers.guard_removal.families import CLASS_CWE, CLASS_WORDS, FAMILIES
from reviewers.analyzers.guard_removal.model import Guard, Sink
from reviewers.analyzers.guard_removal.protections import ModuleScan, ScanBudgetExceeded
from reviewers.kernel.contracts import Severity

RULE = "python:removed-guard"
# a guard's line rewritten into one this alike is the same check weakened (`and` → `or`, a pattern
# loosened, an option switched), not a different statement in its place
REWRITTEN_RATIO = 0.75
KIND = "removed-guard"
# classes whose damage is a nuisance or a phishing page rather than the server's: medium
_MEDIUM = frozenset({"redirect", "ssrf", "compare", "dos", "csrf"})
# a permission check is replaced only by another permission check: a login check lets every user in
# guards that only stand in at head for one that moved (`sanitizers.HELPER_CHECK`)
_UNREPORTED = frozenset({"checked-by-helper"})
# a check known only by its shape (`checks`)
_GENERIC = "content-check"
_REPLACES: dict[str, frozenset[str]] = {"permission": frozenset({"permission", "validator"})}


def _best_match(sink: Sink, head: list[Sink]) -> Sink | None:
    candidates = [h for h in head if h.callee == sink.callee]
    if not candidates:
        return None
    wanted = sink.args
    same = [h for h in candidates if h.args == wanted] if len(candidates) > 1 else candidates
    if same:
        return same[0]
    shared = [h for h in candidates if h.names & sink.names]
    if shared:
        return shared[0]
    return candidates[0] if len(candidates) == 1 else None


def _replaced(guard: Guard, classes: frozenset[str], at_head: Sink) -> bool:
    """Whether a guard at head protects the call as the base guard did (or better)."""
    family = FAMILIES[guard.family]
    for other in at_head.guards:
        if not other.classes & classes:
            continue
        if other.family == guard.family and other.key == guard.key:
            if other.strength >= guard.strength:
                return True
            continue
        if family.strict or FAMILIES[other.family].strict:
            continue
        if other.family == _GENERIC and guard.family != _GENERIC:
            continue  # a check no rule reads does not stand in for one whose job is known
        if other.family not in _REPLACES.get(guard.family, frozenset({other.family})):
            continue
        return True
    return False


def _still_fed(guard: Guard, sink: Sink, at_head: Sink) -> bool:
    """Whether the call at head still takes what the guard constrained: a check on a value guards
    nothing once the call is given something else, and a shell runs no injection when its command
    is a constant."""
    if guard.family == "no-shell" and at_head.call is not None:
        return bool(at_head.names)
    if guard.names and at_head.call is not None and sink.call is not None:
        return bool(at_head.names & sink.names) or at_head.args == sink.args
    return True


def _weakened(guard: Guard, at_head: Sink) -> bool:
    return any(o.family == guard.family and o.key == guard.key for o in at_head.guards)


def _head_line(file: ChangedFile, guard: Guard, at_head: Sink) -> tuple[int, bool] | None:
    """Where to say it, and whether the guard's line was rewritten rather than deleted: the call when
    the change touched its line, else where the guard's base line went (the head line written in its
    place, or the one that follows it). None when the change touched neither."""
    first, last = at_head.span
    touched = next((n for n in range(first, last + 1) if file.is_changed(n)), None)
    for hunk in file.change.hunks:
        lines = list(hunk.lines)
        for n, line in enumerate(lines):
            if line.old_line != guard.line or line.kind != "del":
                continue
            following = [x for x in lines[n + 1 :] if x.kind != "del"]
            rewritten = (
                bool(following)
                and following[0].kind == "add"
                and SequenceMatcher(None, line.text.strip(), following[0].text.strip()).ratio() >= REWRITTEN_RATIO
            )
            if touched is not None:
                return touched, rewritten
            shown = [x for x in following if x.new_line is not None and x.text.strip()]
            after = shown[0].new_line if shown else None
            before = next((x.new_line for x in reversed(lines[:n]) if x.new_line is not None and x.text.strip()), None)
            place = after or before
            return (place, rewritten) if place is not None else None
    return (touched, False) if touched is not None else None


def _severity(cls: str) -> Severity:
    if cls in _MEDIUM:
        return "medium"
    spec = SINKS.get(cls)
    return spec.severity if spec is not None else "high"


def _issue(
    guard: Guard, cls: str, at_head: Sink, line: int, head_text: str, weakened: bool, broken: dict[str, str]
) -> Issue:
    family = FAMILIES[guard.family]
    cwe = family.cwe or CLASS_CWE[cls]
    verb = "weakens" if weakened else "removes"
    title = f"The change {verb} {family.what} in front of {CLASS_WORDS[cls]}"
    if broken:
        title = f"The change replaces {family.what} in front of {CLASS_WORDS[cls]} with one that does not work"
    lines = head_text.splitlines()
    call = lines[at_head.line - 1].strip() if 1 <= at_head.line <= len(lines) else ""
    what = family.what.removeprefix("a ").removeprefix("an ")
    if at_head.callee in ("<view>", "<function>"):
        where = f"the function at line {at_head.line} (`{call}`)"
    else:
        where = f"`{call}` (line {at_head.line})"
    if family.strict:  # an option or a safe variant of the call itself
        body = f"At the base this call had {family.what}: `{guard.text}` (base line {guard.line}). At head {where} "
        body += "runs without it."
    else:
        body = f"At the base, `{guard.text}` (base line {guard.line}) stood in front of {where}. At head the "
        body += "function is still there" if at_head.call is None else "call is still made"
        body += " and nothing equivalent runs first."
    for name, why in broken.items():
        body += f" `{name}` does not count as a guard: its body {why}."
    body += (
        f" The change itself is the evidence, whatever the origin of the data: this {what} is what kept "
        f"{CLASS_WORDS[cls]} safe. Restore it, or show where the same protection now applies first."
    )
    return Issue(line, RULE, _severity(cls), title[:200], body[:4000], kind=f"{KIND}:{guard.family}",
                 confidence="high", cwe=cwe)  # fmt: skip


def _touched(file: ChangedFile) -> tuple[frozenset[int], frozenset[int]]:
    """The lines the change wrote (at head) and removed (at base), each with the line on the other
    side where a pure addition or deletion sits, so that the function around it is read on both."""
    head: set[int] = set()
    base: set[int] = set()
    for hunk in file.change.hunks:
        old, new = hunk.old_start, hunk.new_start
        for line in hunk.lines:
            if line.kind == "add":
                head.add(line.new_line or new)
                base.update((old, max(old - 1, 1)))
            elif line.kind == "del":
                base.add(line.old_line or old)
                head.update((new, max(new - 1, 1)))
            if line.old_line is not None:
                old = line.old_line + 1
            if line.new_line is not None:
                new = line.new_line + 1
    return frozenset(head), frozenset(base)


def removed_guard_issues(file: ChangedFile, base_text: str, base_path: str, project: Project) -> list[Issue] | None:
    """The guards the change took away in front of calls that remain, as issues on the head file;
    None when either version does not parse or costs more than the scan's step budget (nothing can
    then be said about what was removed)."""
    head_tree, base_tree = project.parse(file.text, file.path), project.parse(base_text, base_path)
    if head_tree is None or base_tree is None:
        return None
    head_touched, base_touched = _touched(file)
    try:
        head = ModuleScan(project, build_module(file.path, head_tree), file.text, head_touched)
        base = ModuleScan(project, build_module(base_path, base_tree), base_text, base_touched)
    except (ScanBudgetExceeded, RecursionError):
        return None
    out: list[Issue] = []
    said: set[tuple[str, int, str]] = set()
    # every call of the base by (callee, arguments): a head call whose twin at the base already ran
    # without the guard (in this function or one it moved from) is not what the change took away
    base_calls: dict[str, list[Sink]] = {}
    for sinks in base.scopes.values():
        for sink in sinks:
            if sink.call is not None:
                base_calls.setdefault(sink.callee, []).append(sink)
    for guard in base.module_guards:  # CSRF protection or a login hook for the whole app, gone
        exposed = head.unguarded_views(guard.classes)
        if exposed and not any(h.family == guard.family and h.key == guard.key for h in head.module_guards):
            view = exposed[0]
            at_head = Sink(guard.classes, "<view>", None, frozenset(), view.lineno, (), end_line=view.lineno)
            placed = _head_line(file, guard, at_head)
            if placed is not None:
                said.add((guard.family, guard.line, guard.key))
                out.append(_issue(guard, sorted(guard.classes)[0], at_head, placed[0], file.text, placed[1], {}))
    for qualname, base_sinks in base.scopes.items():
        head_sinks = head.scopes.get(qualname)
        if head_sinks is None:
            continue
        for sink in base_sinks:
            for guard in sink.guards:
                if (guard.family == "size-limit" and guard.names) or FAMILIES[guard.family].strict:
                    classes = guard.classes  # a bound on a value protects whatever consumes it; an option, its call
                else:
                    classes = guard.classes & sink.classes
                said_key = (guard.family, guard.line, guard.key)
                if not classes or said_key in said or guard.family in _UNREPORTED:
                    continue
                matched = _best_match(sink, head_sinks)
                if matched is None or _replaced(guard, classes, matched) or not _still_fed(guard, sink, matched):
                    continue
                if guard.family != "size-limit" and not classes & matched.classes:
                    continue  # at head the function is no view (or the call no sink) of that class
                if (
                    matched.call is not None
                    and matched.args != sink.args
                    and any(
                        twin.args == matched.args and not _replaced(guard, classes, twin)
                        for twin in base_calls.get(matched.callee, [])
                    )
                ):
                    continue  # the same call ran without this guard before the change
                at_head = matched
                placed = _head_line(file, guard, at_head)
                if placed is None:
                    continue
                said.add(said_key)
                line, rewritten = placed
                weakened = rewritten or _weakened(guard, at_head)
                broken = head.broken.get(qualname, {})
                out.append(_issue(guard, sorted(classes)[0], at_head, line, file.text, weakened, broken))
    return out
