"""What the interpreter knows about a value: the origins it carries, and its parts when known.

An `Origin` is where (part of) a value came from: request data (`source`), a request object
(`request`: not data itself, but its `args`, `form`, ... are), a parameter of the function being
summarised (`param`, with the attribute path read from it), a value the analysis cannot see
(`unknown`), a non-cryptographic random number (`weakrand`). Each origin carries the sink classes
it was cleared for by a sanitiser or a guard that dominates the use. A constant has no origins.

Lists, tuples, dicts and config parsers keep their parts while every operation on them is known
(`seq`, `items`), so `l.pop(0)` or `cfg.get("s", "k")` picks the right one; anything else folds
them into the container's flat origins, which are always the union of its parts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

OriginKind = Literal["source", "request", "param", "unknown", "weakrand"]
# Pseudo-classes an origin can carry besides sink classes: the path was normalised (realpath,
# resolve), or it was checked to start with "/" and not "//" (a local redirect).
NORMALISED = "~normalised"
LOCAL_SLASH = "~slash"
NOT_DOUBLE_SLASH = "~no-double-slash"
# A route parameter whose converter takes no "/" (Flask's `<name>`, Starlette's `{name}`): as the last
# component of a path it names one entry of the directory it is joined to and cannot leave it. Kept
# only while the value stays that last component (see `without_segment`).
SEGMENT = "~segment"
# The value was spliced into text with fixed parts (`"SELECT ... " + x`, an f-string, `%`, `.format`,
# `.join`): part of a statement, not the whole of one. A request that supplies a whole SQL statement
# (a query console) is arbitrary SQL by design or by mistake, not an injection into the program's own.
SPLICED = "~spliced"
MAX_PATH = 4  # attribute steps remembered after a parameter (`self.req.args.get`)
MAX_PARTS = 32  # list items / dict entries kept apart; more fold into the container
MAX_ORIGINS = 24


@dataclass(frozen=True, slots=True)
class Origin:
    kind: OriginKind
    what: str = ""  # `request.args`, a parameter's name, ...
    path: tuple[str, ...] = ()
    cleared: frozenset[str] = frozenset()
    line: int = 0


@dataclass(frozen=True)
class Value:
    origins: frozenset[Origin] = frozenset()
    seq: tuple[Value, ...] | None = None
    items: tuple[tuple[Hashable, Value], ...] | None = None
    fields: tuple[tuple[str, Value], ...] | None = None
    cls: str | None = None  # "module/path.py::Class" of an instance built from a class we read
    callable_ref: str | None = None  # "module/path.py::func" for a function or class named here
    normalised: bool = False

    @property
    def constant(self) -> bool:
        return not self.origins

    def field(self, name: str) -> Value | None:
        return dict(self.fields).get(name) if self.fields is not None else None

    def item(self, key: Hashable) -> Value | None:
        return dict(self.items).get(key) if self.items is not None else None


CONSTANT = Value()
UNKNOWN = Value(frozenset({Origin("unknown")}))


def join(values: Iterable[Value]) -> Value:
    """The value that is any of these (a branch join): origins united, parts kept only when equal."""
    vals = list(values)
    if not vals:
        return CONSTANT
    first = vals[0]
    if all(v == first for v in vals[1:]):
        return first
    origins = frozenset().union(*(v.origins for v in vals))
    cls = first.cls if all(v.cls == first.cls for v in vals) else None
    fields = first.fields if all(v.fields == first.fields for v in vals) else None
    seqs = [v.seq for v in vals]
    if all(q is not None for q in seqs):
        # lists that start alike keep that start (`args = [adb, "-s", id]; if shell: args += ["shell"]`):
        # the program stays the first item; what differs folds into one item after the common part
        known = [q for q in seqs if q is not None]
        common = 0
        while all(len(q) > common for q in known) and all(q[common] == known[0][common] for q in known):
            common += 1
        rest = [part for q in known for part in q[common:]]
        parts = (*known[0][:common], *((flat(*rest),) if rest else ()))
        return Value(origins, seq=parts, cls=cls, fields=fields)
    return Value(origins, cls=cls, fields=fields)


def compact(origins: frozenset[Origin]) -> frozenset[Origin]:
    """At most MAX_ORIGINS origins: beyond that, a parameter's paths fold into the parameter and
    lines are forgotten (a value built from everything in a big function would otherwise carry
    hundreds, and every call through a summary would resolve each one)."""
    if len(origins) <= MAX_ORIGINS:
        return origins
    return frozenset(Origin(o.kind, o.what, o.path[:1], o.cleared) for o in origins)


def of(origins: Iterable[Origin]) -> Value:
    return Value(compact(frozenset(origins)))


def flat(*values: Value) -> Value:
    """A value carrying every origin of the given ones, no parts."""
    return Value(compact(frozenset().union(*(v.origins for v in values)))) if values else CONSTANT


def sequence(parts: Iterable[Value]) -> Value:
    elems = tuple(parts)
    if len(elems) > MAX_PARTS:
        return flat(*elems)
    return Value(frozenset().union(*(v.origins for v in elems)) if elems else frozenset(), seq=elems)


def mapping(entries: Iterable[tuple[Hashable, Value]]) -> Value:
    pairs = tuple(entries)
    if len(pairs) > MAX_PARTS:
        return flat(*(v for _, v in pairs))
    merged: dict[Hashable, Value] = {}
    for key, value in pairs:
        merged[key] = value
    return Value(
        frozenset().union(*(v.origins for v in merged.values())) if merged else frozenset(),
        items=tuple(merged.items()),
    )


def with_item(container: Value, key: Hashable | None, value: Value) -> Value:
    """The container after `container[key] = value` (key None: not a constant)."""
    origins = container.origins | value.origins
    if key is None or container.items is None:
        return Value(origins, cls=container.cls, fields=container.fields)
    merged = dict(container.items)
    merged[key] = value
    if len(merged) > MAX_PARTS:
        return Value(origins)
    return replace(
        container, origins=frozenset().union(*(v.origins for v in merged.values())), items=tuple(merged.items())
    )


def appended(container: Value, value: Value) -> Value:
    if container.seq is None or len(container.seq) >= MAX_PARTS:
        return Value(container.origins | value.origins, cls=container.cls, fields=container.fields)
    return sequence((*container.seq, value))


def clear(value: Value, classes: Iterable[str]) -> Value:
    """The value with every origin cleared for these classes (a sanitiser or a guard)."""
    extra = frozenset(classes)
    if not extra:
        return value
    # the constructor, not dataclasses.replace: this runs for every sanitiser, guard and summary call
    origins = frozenset(o if extra <= o.cleared else Origin(o.kind, o.what, o.path, o.cleared | extra, o.line)
                        for o in value.origins)  # fmt: skip
    return Value(
        origins,
        seq=tuple(clear(v, extra) for v in value.seq) if value.seq is not None else None,
        items=tuple((k, clear(v, extra)) for k, v in value.items) if value.items is not None else None,
        fields=value.fields,
        cls=value.cls,
        normalised=value.normalised,
    )


def normalised(value: Value) -> Value:
    return replace(clear(value, {NORMALISED}), normalised=True)


def extend_path(origin: Origin, attr: str) -> Origin:
    if len(origin.path) >= MAX_PATH:
        return origin
    return Origin(origin.kind, origin.what, (*origin.path, attr), origin.cleared, origin.line)


def without_segment(value: Value) -> Value:
    """The value once something may follow it in a path, or text of unknown shape was made from it:
    its origins are no longer one slash-free segment."""
    if not any(SEGMENT in o.cleared for o in value.origins):
        return value
    origins = frozenset(
        Origin(o.kind, o.what, o.path, o.cleared - {SEGMENT}, o.line) if SEGMENT in o.cleared else o
        for o in value.origins
    )
    return replace(
        value,
        origins=origins,
        seq=tuple(without_segment(v) for v in value.seq) if value.seq is not None else None,
        items=tuple((k, without_segment(v)) for k, v in value.items) if value.items is not None else None,
    )
