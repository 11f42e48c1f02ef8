"""What a call evaluates to: sources and sanitisers by name, query builders, path joins, the
methods of known values (containers, config parsers, request objects, files), and the repository's
own functions and classes through their summaries (parameter → return, parameter → sink, fields).

`CallHandling` is the call half of `engine.Interpreter`: `eval_call` first asks `SinkChecks` whether
the call is a sink, then works out its value. A summary is computed by the interpreter itself
(`engine.summarize`); `substitute` puts a caller's arguments into a summary's symbolic values, and
`attribute` says what `value.attr` carries.
"""

from __future__ import annotations

import ast
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from reviewers.analyzers.flow import handlers as H
from reviewers.analyzers.flow import sinks as S
from reviewers.analyzers.flow.project import ModuleInfo, Project, Summary
from reviewers.analyzers.flow.rules import (
    CLEAN_CALLS,
    CLEAN_METHODS,
    NORMALISERS,
    PATH_JOINS,
    PATH_NAME_ATTRIBUTES,
    REQUEST_NAMES,
    REQUEST_PARTS,
    REQUEST_PROXIES,
    SANITISERS,
    SOURCE_CALLS,
    WEAK_RANDOM,
)
from reviewers.analyzers.flow.sink_checks import COMMAND_LINE_CLEARS, LOCAL_USER_CLEARS, SinkChecks
from reviewers.analyzers.flow.syntax import database_like, dotted, interpolates, model_manager, names_secret
from reviewers.analyzers.flow.values import (
    CONSTANT,
    SPLICED,
    UNKNOWN,
    Origin,
    Value,
    appended,
    clear,
    extend_path,
    flat,
    mapping,
    normalised,
    of,
    sequence,
    with_item,
    without_segment,
)

if TYPE_CHECKING:
    from reviewers.analyzers.flow.engine import Interpreter

    Env = dict[str, Value]


def summarize(project: Project, info: ModuleInfo, qualname: str, depth: int = 0) -> Summary:
    """`engine.summarize`, looked up when called (the interpreter computes summaries; a bench may wrap it)."""
    from reviewers.analyzers.flow import engine

    return engine.summarize(project, info, qualname, depth)


_MUTATORS = frozenset({"append", "add", "insert", "extend", "update", "setdefault", "appendleft", "put", "push"})

_READS = frozenset({"read", "readline", "readlines"})

_FILE_OPENERS = frozenset(
    {"open", "io.open", "codecs.open", "aiofiles.open", "gzip.open", "bz2.open", "lzma.open", "os.fdopen"}
)

# Calls that run a program: what it prints is the program's output, of unknown origin like a file's
# text, not the arguments that started it (a view that returns `git log`'s output for a ref the
# request named reflects git's text, not the request's).
_PROCESS_RUNNERS = frozenset(
    {"subprocess.check_output", "subprocess.run", "subprocess.getoutput", "subprocess.getstatusoutput",
     "subprocess.Popen", "os.popen", "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell"}
)  # fmt: skip


# Template engines' loaders: a template the developer wrote, found by its name. What it renders is
# the developer's text and the context it is given, not the name that chose it; the loader refuses a
# name outside its template directories (Django's safe_join, Jinja's split_template_path), so the
# name is no path to a file of the requester's choosing either (`names_checked_template`).
_TEMPLATE_LOADERS = frozenset({"django.template.loader.get_template", "django.template.loader.select_template"})
TEMPLATE_LOADER_METHODS = frozenset({"get_template", "select_template", "get_or_select_template"})
# Renderers that take a template's name first: the result carries the context, not the name.
_TEMPLATE_RENDERERS = frozenset(
    {"django.template.loader.render_to_string", "django.shortcuts.render_to_string", "render_to_string"}
)


def _statement_base(call: ast.Call, name: str, receiver: Value | None, args: list[Value]) -> Value | None:
    """What a query-builder call's statement starts from, or None when the call builds none: nothing
    from a builder function or a database handle (`select(User)`, `db.select(User)`), the statement
    a chained call is made on (`.filter_by(...)`), the manager a model's `.objects`/`.query` is."""
    func = call.func
    if name in S.ORM_STATEMENT_CALLS:
        return CONSTANT
    if receiver is not None and receiver.cls == S.ORM_STATEMENT:
        return receiver
    if not isinstance(func, ast.Attribute):
        return None
    if model_manager(func.value) and receiver is not None:
        return flat(receiver)
    handle = dotted(func.value)
    database_handle = func.attr in S.ORM_HANDLE_METHODS and handle and database_like(handle, name)
    return CONSTANT if database_handle and _names_models(call, args) else None


def _names_models(call: ast.Call, args: list[Value]) -> bool:
    """Whether a call's arguments read as what a query builder starts from (`db.select(User)`,
    `session.query(User.id)`): models, tables or columns, named and carrying no data (a name the
    analysis cannot see counts: a model from a library), not literals, so that a list's or a
    dict's `insert(0, x)` / `update(data)` on a name like `c` or `session` stays what it is."""
    return (
        bool(call.args)
        and not call.keywords
        and all(
            isinstance(a, ast.Name | ast.Attribute) and all(o.kind == "unknown" for o in v.origins)
            for a, v in zip(call.args, args, strict=False)
        )
    )


def attribute(value: Value, attr: str) -> Value:
    """What `value.attr` carries."""
    member = H.entry_attribute(value, attr)
    if member is not None:
        return member
    known = value.field(attr)
    if known is not None:
        return known
    origins: set[Origin] = set()
    for o in value.origins:
        if attr in _READS and o.kind == "source" and o.cleared >= LOCAL_USER_CLEARS:
            origins.add(Origin("unknown", f"{o.what}.{attr}()"))
        elif o.kind == "request":
            if attr in REQUEST_PARTS:
                origins.add(Origin("source", f"request.{attr}", line=o.line))
        elif o.kind == "param":
            origins.add(extend_path(o, attr))
        else:
            origins.add(o)
    out = of(origins)
    if attr in PATH_NAME_ATTRIBUTES:
        out = clear(out, {"path"})
    return out


def resolve_path(value: Value, path: Sequence[str]) -> Value:
    for step in path:
        value = attribute(value, step)
    return value


def substitute(value: Value, binding: dict[str, Value]) -> Value:
    """A summary's symbolic value with the caller's arguments put in for the parameters."""
    parts: list[Value] = []
    for o in value.origins:
        if o.kind == "param":
            actual = binding.get(o.what)
            if actual is not None:
                parts.append(clear(resolve_path(actual, o.path), o.cleared))
        else:
            parts.append(of({o}))
    out = flat(*parts)
    if value.seq is not None:
        out = sequence(substitute(v, binding) for v in value.seq)
    elif value.items is not None:
        out = mapping((k, substitute(v, binding)) for k, v in value.items)
    if value.fields is not None:
        out = replace(out, fields=tuple((k, substitute(v, binding)) for k, v in value.fields), cls=value.cls)
    elif value.cls is not None:
        out = replace(out, cls=value.cls)
    if value.normalised:
        out = replace(out, normalised=True)
    return out


def bind(
    params: tuple[str, ...], args: list[Value], kwargs: dict[str, Value], receiver: Value | None
) -> dict[str, Value]:
    names = list(params)
    out: dict[str, Value] = {}
    if receiver is not None and names:
        out[names.pop(0)] = receiver
    for name, value in zip(names, args, strict=False):
        out[name] = value
    for key, value in kwargs.items():
        if key in params:
            out[key] = value
    return out


class CallHandling(SinkChecks):
    """The call half of `engine.Interpreter` (see the module's docstring)."""

    if TYPE_CHECKING:  # the interpreter's state and expression side, which `engine.Interpreter` has
        depth: int

        def eval(self, expr: ast.expr, env: Env) -> Value: ...
        def eval_attribute(self, expr: ast.Attribute, env: Env) -> Value: ...
        def const_key(self, expr: ast.expr, env: Env) -> Hashable | None: ...

    def eval_call(self, call: ast.Call, env: Env) -> Value:  # noqa: C901 - the table of call kinds
        func = call.func
        name = self.qualified(func)
        receiver = self.eval(func.value, env) if isinstance(func, ast.Attribute) else None
        callee = self.eval(func, env) if isinstance(func, ast.Name) else None
        args = [self.eval(a, env) for a in call.args]
        kwargs: dict[str, Value] = {}
        for k in call.keywords:
            value = self.eval(k.value, env)
            kwargs[k.arg or "**"] = flat(kwargs["**"], value) if k.arg is None and "**" in kwargs else value
            if k.arg and names_secret(k.arg):
                self.check_secret_store(k.arg, value, k.value)
        everything = flat(*args, *kwargs.values())
        self.check_call_sinks(call, name, receiver, args, kwargs, env)

        if name in SOURCE_CALLS:
            return of({Origin("source", f"{name}()", cleared=LOCAL_USER_CLEARS, line=call.lineno)})
        if (handed := H.source_call(cast("Interpreter", self), call, name)) is not None:
            return handed
        if (made := H.constructed(name)) is not None:
            return made
        if name.endswith((".parse_args", ".parse_known_args")) or name in ("parse_args", "parse_known_args"):
            return of({Origin("source", f"{name}()", cleared=COMMAND_LINE_CLEARS, line=call.lineno)})
        if name in WEAK_RANDOM:
            return of({Origin("weakrand", f"{name}()", line=call.lineno)})
        if name in CLEAN_CALLS:
            return CONSTANT
        if name in SANITISERS:
            return clear(everything, SANITISERS[name])
        if name in NORMALISERS:
            return normalised(everything)
        if name in S.CONFIG_PARSERS or name in ("dict", "collections.OrderedDict", "collections.defaultdict"):
            return mapping(kwargs.items()) if name != "collections.defaultdict" else mapping(())
        if name in ("list", "tuple") and len(args) == 1:
            return args[0] if args[0].seq is not None else flat(args[0])
        if name in ("compile", "builtins.compile"):
            return args[0] if args else kwargs.get("source", CONSTANT)  # the code carries its source, not its file name
        if self.template_loader(func, name, receiver):
            return CONSTANT  # the developer's template, whatever name chose it
        if name in _TEMPLATE_RENDERERS and args:
            context = [v for k, v in kwargs.items() if k not in ("template_name", "request", "using")]
            return flat(CONSTANT, *args[1:2], *context)  # the context, rendered into the developer's text
        if name in _FILE_OPENERS:
            return UNKNOWN  # what a file holds is not the data that named it (a script path on a command line)
        if name in _PROCESS_RUNNERS:
            return UNKNOWN  # its arguments were checked as a command above; its output is the program's
        if name in S.XML_PARSER_FACTORIES:
            return H.unsafe_parser(call, self.project)
        if name in S.SAX_FACTORIES:
            return Value(cls=S.SAX_PARSER)
        if name in PATH_JOINS:  # `Path(base, name)`, `os.path.join(base, name)`: only the last part stays last
            return flat(*map(without_segment, args[:-1]), *args[-1:], *map(without_segment, kwargs.values()))
        if isinstance(func, ast.Attribute) and func.attr == "joinpath" and receiver is not None:
            return flat(without_segment(receiver), *map(without_segment, args[:-1]), *args[-1:])
        statement = self.orm_statement(call, name, receiver, args, kwargs)
        if statement is not None:
            return statement
        if isinstance(func, ast.Attribute) and receiver is not None and not (receiver.cls and "::" in receiver.cls):
            listed = H.member_names(func.attr, call.lineno)
            if listed is not None:
                return listed
        return without_segment(self.call_result(call, func, name, receiver, callee, args, kwargs, env))

    def template_loader(self, func: ast.expr, name: str, receiver: Value | None) -> bool:
        """Whether the call loads a template by its name: Django's loader functions, or a template
        engine's `get_template` (a Jinja environment, Django's `engines[...]`) on a library object."""
        if name in _TEMPLATE_LOADERS:
            return True
        return (
            isinstance(func, ast.Attribute)
            and func.attr in TEMPLATE_LOADER_METHODS
            and receiver is not None
            and receiver.callable_ref is None
            and not (receiver.cls and "::" in receiver.cls)
        )

    def orm_statement(
        self, call: ast.Call, name: str, receiver: Value | None, args: list[Value], kwargs: dict[str, Value]
    ) -> Value | None:
        """What a query builder returns (`select(User)`, `db.select(...)`, `session.query(User)`,
        `User.query` / `User.objects`, then `.filter_by(name=x)`, `.where(...)`, `.values(...)` on
        the result): a statement object that carries its values as bound parameters, so they are no
        longer SQL text. Text spliced into a positional argument (`.where(f"name = '{x}'")`, which
        SQLAlchemy before 1.4 coerced to SQL) stays SQL; `text(...)` is a sink of its own. None for
        any other call."""
        base = _statement_base(call, name, receiver, args)
        if base is None:
            return None
        bound = [v if self.spliced_text(expr) else clear(v, {"sql"}) for expr, v in zip(call.args, args, strict=False)]
        return Value(flat(base, *bound, *(clear(v, {"sql"}) for v in kwargs.values())).origins, cls=S.ORM_STATEMENT)

    def spliced_text(self, expr: ast.expr) -> bool:
        """Whether the expression is text with values spliced in, here or where its name was assigned."""
        return interpolates(expr) or (isinstance(expr, ast.Name) and expr.id in self._built)

    def call_result(
        self,
        call: ast.Call,
        func: ast.expr,
        name: str,
        receiver: Value | None,
        callee: Value | None,
        args: list[Value],
        kwargs: dict[str, Value],
        env: Env,
    ) -> Value:
        """What a call that is no source, sanitiser or path join returns: a summary's result, a
        method's, or its arguments' origins."""
        everything = flat(*args, *kwargs.values())

        ref = callee.callable_ref if callee is not None else None
        if ref is None and isinstance(func, ast.Attribute):
            ref_value = self.eval_attribute(func, env) if receiver is not None and receiver.callable_ref else None
            ref = ref_value.callable_ref if ref_value is not None else None
            if ref is None and receiver is not None and receiver.cls and "::" in receiver.cls:
                ref = self.method_ref(receiver.cls, func.attr)
                if ref is not None:
                    return self.apply(call, ref, args, kwargs, receiver)
        if ref is not None and "::" in ref:
            return self.apply(call, ref, args, kwargs, None)

        if isinstance(func, ast.Attribute) and receiver is not None:
            return self.method(call, func, receiver, args, kwargs, env)
        if ref is not None and ref.startswith("lib:"):
            return everything
        return everything if (args or kwargs) else UNKNOWN

    def method(
        self,
        call: ast.Call,
        func: ast.Attribute,
        receiver: Value,
        args: list[Value],
        kwargs: dict[str, Value],
        env: Env,
    ) -> Value:
        attr = func.attr
        target = func.value
        owner = dotted(target)
        if attr in REQUEST_PARTS and (
            any(o.kind == "request" for o in receiver.origins)
            or (self.module.frameworks and (owner in REQUEST_NAMES or owner.endswith(".request")))
            or self.qualified(target) in REQUEST_PROXIES
        ):
            return of(
                {Origin("source", f"request.{attr}()", line=call.lineno)}
            )  # request.get_json(), await request.post()
        const_args = [self.const_key(a, env) for a in call.args]
        if attr in _MUTATORS and isinstance(target, ast.Name):
            current = self.lookup(target.id, env)
            if attr in ("append", "add", "appendleft", "put", "push") and args:
                env[target.id] = appended(current, args[0])
            elif attr == "insert" and len(args) == 2 and current.seq is not None and isinstance(const_args[0], int):
                parts = list(current.seq)
                parts.insert(const_args[0], args[1])
                env[target.id] = sequence(parts)
            elif attr == "extend" and args and current.seq is not None:
                env[target.id] = sequence(
                    (*current.seq, *(args[0].seq if args[0].seq is not None else (flat(args[0]),)))
                )
            elif attr == "setdefault" and len(args) == 2:
                env[target.id] = (
                    with_item(current, const_args[0], args[1]) if current.item(const_args[0]) is None else current
                )
                return current.item(const_args[0]) or args[1]
            else:
                env[target.id] = Value(flat(current, *args, *kwargs.values()).origins, cls=current.cls)
            return CONSTANT
        if attr == "set" and len(args) == 3 and isinstance(target, ast.Name):
            # ConfigParser.set(section, option, value)
            option: Hashable | None = (const_args[0], const_args[1]) if None not in const_args[:2] else None
            env[target.id] = with_item(self.lookup(target.id, env), option, args[2])
            return CONSTANT
        if attr in ("get", "getlist", "pop", "__getitem__", "getint", "getfloat", "getboolean"):
            if attr in ("getint", "getfloat", "getboolean"):
                return CONSTANT
            lookup_key: Hashable | None
            if (
                len(const_args) >= 2
                and receiver.items is not None
                and all(isinstance(k, tuple) for k, _ in receiver.items)
            ):
                lookup_key = (const_args[0], const_args[1])  # ConfigParser.get(section, option)
            else:
                lookup_key = const_args[0] if const_args else None
            key = lookup_key
            result: Value
            if attr == "pop" and receiver.seq is not None and receiver.seq:
                index = key if isinstance(key, int) else -1
                parts = list(receiver.seq)
                if -len(parts) <= index < len(parts):
                    result = parts.pop(index)
                    if isinstance(target, ast.Name):
                        env[target.id] = sequence(parts)
                    return result
            if key is not None and receiver.items is not None:
                item = receiver.item(key)
                if attr == "pop" and isinstance(target, ast.Name) and item is not None:
                    env[target.id] = mapping((k, v) for k, v in receiver.items if k != key)
                default = args[1] if len(args) > 1 and not isinstance(key, tuple) else CONSTANT
                return item if item is not None else default
            return flat(receiver, *(args[1:] if attr == "get" else []))
        if attr == "setFeature" and len(call.args) == 2 and isinstance(target, ast.Name):
            feature = self.qualified(call.args[0])
            on = isinstance(call.args[1], ast.Constant) and bool(call.args[1].value)
            if on and feature.endswith(("feature_external_ges", "feature_external_pes")):
                env[target.id] = Value(cls=S.UNSAFE_PARSER)
            return CONSTANT
        if attr in CLEAN_METHODS:
            return CONSTANT
        if attr in ("read_text", "read_bytes"):
            return UNKNOWN  # a file's content, not its name
        if attr in _READS and any(o.kind == "param" or o.cleared >= LOCAL_USER_CLEARS for o in receiver.origins):
            # a file named on the command line (argparse.FileType): its content is the user's own file;
            # on a parameter, the read is remembered and judged at each call
            return flat(attribute(receiver, attr), *args)
        if attr in ("resolve", "absolute", "realpath"):
            return normalised(flat(receiver, *args))
        if attr == "copy":
            return receiver
        if attr == "values" or attr == "items":
            return flat(receiver)
        if attr == "join":
            return clear(flat(receiver, *args), (SPLICED,))
        if attr == "format":
            return clear(flat(receiver, *args, *kwargs.values()), (SPLICED,))
        return flat(receiver, *args, *kwargs.values())

    def method_ref(self, cls_ref: str, method: str) -> str | None:
        path, _, cls_name = cls_ref.partition("::")
        info = self.project.module_at(path)
        if info is None:
            return None
        if f"{cls_name}.{method}" in info.functions:
            return f"{path}::{cls_name}.{method}"
        cls = info.classes.get(cls_name)
        for base in cls.bases if cls is not None else []:
            base_name = dotted(base)
            if base_name in info.classes and f"{base_name}.{method}" in info.functions:
                return f"{path}::{base_name}.{method}"
        return None

    def apply(
        self, call: ast.Call, ref: str, args: list[Value], kwargs: dict[str, Value], receiver: Value | None
    ) -> Value:
        """A repository function's or class's effect at this call."""
        path, _, qualname = ref.partition("::")
        info = self.project.module_at(path)
        if info is None:
            return flat(*args, *kwargs.values())
        if qualname in info.classes:
            return self.construct(call, info, qualname, args, kwargs)
        if qualname not in info.functions:
            return flat(*args, *kwargs.values())
        summary = summarize(self.project, info, qualname, self.depth + 1)
        binding = bind(summary.params, args, kwargs, receiver)
        for sink in summary.sinks:
            actual = binding.get(sink.param)
            if actual is not None:
                # what the function does to a segment before its sink is not known here
                value = without_segment(clear(resolve_path(actual, sink.path), sink.cleared))
                self.sink(call, sink.cls, value, sink.call, via=sink.where)
        return substitute(summary.returns, binding)

    def construct(
        self, call: ast.Call, info: ModuleInfo, cls_name: str, args: list[Value], kwargs: dict[str, Value]
    ) -> Value:
        ref = f"{info.path}::{cls_name}"
        instance = Value(flat(*args, *kwargs.values()).origins, cls=ref)
        init = self.method_ref(ref, "__init__")
        if init is None:
            declared = [
                n.target.id for n in info.classes[cls_name].body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            ]  # fmt: skip
            fields = dict(zip(declared, args, strict=False))
            fields.update({k: v for k, v in kwargs.items() if k != "**"})
            return replace(instance, fields=tuple(fields.items()))
        init_path, _, init_name = init.partition("::")
        init_info = self.project.module_at(init_path)
        if init_info is None:
            return instance
        summary = summarize(self.project, init_info, init_name, self.depth + 1)
        binding = bind(summary.params, args, kwargs, instance)
        for sink in summary.sinks:
            actual = binding.get(sink.param)
            if actual is not None:
                self.sink(
                    call, sink.cls, clear(resolve_path(actual, sink.path), sink.cleared), sink.call, via=sink.where
                )
        return replace(instance, fields=tuple((k, substitute(v, binding)) for k, v in summary.fields))
