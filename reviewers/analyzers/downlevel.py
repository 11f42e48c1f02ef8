"""Python syntax newer than the running interpreter's, rewritten into text its `ast` reads — line for line.

`reviewers.analyzers.pysyntax` says why this exists and when it runs; this module is the how. It is
self-contained on purpose (the standard library, and libcst only inside `downlevel`), because it is
used in two processes: libcst runs only in the converter process pysyntax keeps
(`python -I downlevel.py --serve`); the service only calls `splice`.

`downlevel(source)` parses with libcst (Python 3.0 to 3.15) and rewrites what 3.11 refuses, keeping
every line where it was (a construct that spanned three lines still spans three; columns may move on
a rewritten line):

- f-strings (PEP 701: `f"{d["name"]}"`, backslashes, comments and line breaks inside the braces,
  any nesting) and t-strings (PEP 750). Their text cannot be re-quoted for 3.11 in general, so each
  string — a whole implicit concatenation when one part is an f- or t-string — becomes a call chain
  `(_rl_fstring_3((expr1))((expr2)))` that keeps every replacement-field expression at its own line,
  plus a `Unit` describing the literal parts, conversions, format specs and `=` texts. `splice` then
  puts back, in the tree 3.11 built from the text, the node 3.12 would have built: an `ast.JoinedStr`
  for an f-string; for a t-string, the call that builds it at run time,
  `string.templatelib.Template("text", string.templatelib.Interpolation(value, "expr", conv, spec))`
  — a template is not a `str`, and an analyzer should not take it for string building.
- type parameters (PEP 695/696: `def f[T: int = str](x: T)`, `class C[T]:`) are dropped (3.11 has
  no field for them; their bounds and defaults are not in the tree), and `type X[T] = v` becomes
  `X = v`. Line breaks inside the removed text become backslash continuations.
- `except A, B:` (PEP 758) gets its parentheses; `lazy import` (PEP 810) loses the word `lazy`;
  `[*a for a in b]` and `{**d for d in ds}` (PEP 798) lose the star (a set comprehension stands in
  for the dict one).

What libcst itself refuses raises `DownlevelError` with libcst's words and line.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import struct
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import libcst as cst

# A unit's call-chain root is this stem and the unit's number; `downlevel` lengthens the stem until no
# identifier in the file starts with it, so a name of the reviewed code is never taken for one.
NAME_STEM = "_rl_fstring_"
MAX_EXPECTED_NAMED = 6  # of the tokens libcst says it expected, in a message: the full list runs to 30
CONVERSIONS = {"s": 115, "r": 114, "a": 97}  # ast.FormattedValue.conversion: ord() of the letter, -1 for none
# What the converter process may allocate: libcst's native parser grows without bound on adversarial
# nesting, and the service must not be the one to run out.
CONVERTER_MEMORY_BYTES = 2 * 1024**3

# A part of a string unit: ["text", value] or ["expr", debug_text, conversion, spec_parts, source].
Part = list[Any]


class Unit(TypedDict):
    kind: str  # "f" (a JoinedStr) or "t" (a Template)
    parts: list[Part]


class Downlevelled(TypedDict):
    text: str
    stem: str
    units: list[Unit]


class DownlevelError(Exception):
    """The text is not Python that libcst reads, or holds something the rewrite cannot express."""

    def __init__(self, what: str, *, line: int | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.line = line


def downlevel(source: str) -> Downlevelled:
    """`source` rewritten line for line into text the running `ast` reads, with the string units to splice."""
    import libcst as cst

    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        what, line = _libcst_complaint(exc)
        raise DownlevelError(what, line=line) from None
    stem = NAME_STEM
    while stem in source:
        stem = "_" + stem
    rewriter = _rewriter_class()(module, stem)
    text = module.visit(rewriter).code
    return {"text": text, "stem": stem, "units": rewriter.units}


def _libcst_complaint(exc: Exception) -> tuple[str, int | None]:
    """libcst's message, shortened: "expected one of ), *, NAME" and its line, when it says one."""
    message = str(getattr(exc, "message", exc)).strip()
    where = re.search(r"error at (\d+):(\d+):\s*", message)
    line = int(where.group(1)) if where else None
    message = message[where.end() :] if where else re.sub(r"^(?:parser|tokenizer) error:\s*", "", message)
    if message.startswith("expected one of "):
        expected = message.removeprefix("expected one of ").split(", ")
        more = ", ..." if len(expected) > MAX_EXPECTED_NAMED else ""
        message = f"invalid syntax (expected one of {', '.join(expected[:MAX_EXPECTED_NAMED])}{more})"
    return message, line


@functools.cache
def _rewriter_class() -> type[Any]:
    """The libcst transformer, built on first use so that importing this module never imports libcst."""
    import libcst as cst

    @dataclass(frozen=True)
    class Raw(cst.BaseExpression):
        """Text emitted as is where a node was: the rewritten form of a construct."""

        code: str = ""
        lpar: Sequence[cst.LeftParen] = ()
        rpar: Sequence[cst.RightParen] = ()

        def _visit_and_replace_children(self, visitor: Any) -> Raw:
            return self

        def _codegen_impl(self, state: Any, **_: object) -> None:
            state.add_token(self.code)

        def _safe_to_use_with_word_operator(self, position: Any) -> bool:
            return self.code[:1] == "(" and self.code[-1:] == ")"

    def continuations(text: str) -> str:
        """What keeps the line count of removed text: one backslash continuation per line break."""
        return " \\\n" * text.count("\n")

    def interpolates(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.ConcatenatedString):
            return interpolates(node.left) or interpolates(node.right)
        return isinstance(node, cst.FormattedString | cst.TemplatedString)

    # Nodes that hold nothing to rewrite: a transformer rebuilds every node it descends into. Kept as a
    # set of concrete classes: isinstance against libcst's abstract bases costs more than the rest.
    leaf_bases = (
        cst.Name,
        cst.Integer,
        cst.Float,
        cst.Imaginary,
        cst.SimpleString,
        cst.Ellipsis,
        cst.BaseParenthesizableWhitespace,
        cst.TrailingWhitespace,
        cst.EmptyLine,
        cst.Newline,
        cst.Comment,
        cst.Comma,
        cst.Dot,
        cst.Colon,
        cst.Semicolon,
        cst.AssignEqual,
        cst.LeftParen,
        cst.RightParen,
        cst.LeftSquareBracket,
        cst.RightSquareBracket,
        cst.LeftCurlyBrace,
        cst.RightCurlyBrace,
        cst.BaseBinaryOp,
        cst.BaseBooleanOp,
        cst.BaseCompOp,
        cst.BaseUnaryOp,
        cst.BaseAugOp,
        cst.Import,
        cst.ImportFrom,
        cst.ImportAlias,
        cst.Pass,
        cst.Break,
        cst.Continue,
        cst.Global,
        cst.Nonlocal,
        cst.Asynchronous,
    )
    leaves = frozenset(c for c in vars(cst).values() if isinstance(c, type) and issubclass(c, leaf_bases))
    strings = frozenset({cst.FormattedString, cst.TemplatedString})
    rewritten = frozenset(
        {
            cst.FunctionDef,
            cst.ClassDef,
            cst.TypeAlias,
            cst.ExceptHandler,
            cst.ExceptStarHandler,
            cst.LazyImport,
            cst.LazyImportFrom,
            cst.ListComp,
            cst.SetComp,
            cst.GeneratorExp,
            cst.StarredDictComp,
        }
    )

    class WithoutComments(cst.CSTTransformer):
        def leave_Comment(self, original_node: cst.Comment, updated_node: cst.Comment) -> Any:
            return cst.RemoveFromParent()

    class Rewriter(cst.CSTTransformer):
        def __init__(self, module: cst.Module, stem: str) -> None:
            super().__init__()
            self.module = module
            self.stem = stem
            self.units: list[Unit] = []
            self._stack: list[cst.CSTNode] = []

        def code(self, node: object) -> str:
            return self.module.code_for_node(node) if isinstance(node, cst.CSTNode) else ""

        def on_visit(self, node: cst.CSTNode) -> bool:
            self._stack.append(node)
            return type(node) not in leaves

        def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
            self._stack.pop()
            node = updated_node
            kind = type(node)
            if kind in rewritten:
                return self.statement_form(node)
            if kind not in strings and kind is not cst.ConcatenatedString:
                return node
            if self._stack and type(self._stack[-1]) is cst.ConcatenatedString:
                return node  # a part: the whole concatenation is one unit
            return self.string_unit(node) if interpolates(node) else node

        def statement_form(self, node: cst.CSTNode) -> cst.CSTNode:
            """Type parameters, type aliases, bare except tuples, lazy imports, starred comprehensions."""
            if isinstance(node, cst.FunctionDef | cst.ClassDef) and node.type_parameters is not None:
                return node.with_changes(type_parameters=Raw(continuations(self.code(node.type_parameters))))
            if isinstance(node, cst.TypeAlias):
                removed = "".join(
                    self.code(n)
                    for n in (
                        node.whitespace_after_type,
                        node.whitespace_after_name,
                        node.type_parameters,
                        node.whitespace_after_type_parameters,
                        node.whitespace_after_equals,
                    )
                )
                target = cst.AssignTarget(
                    target=node.name,
                    whitespace_before_equal=cst.SimpleWhitespace(continuations(removed) + " "),
                    whitespace_after_equal=cst.SimpleWhitespace(" "),
                )
                return cst.Assign(targets=[target], value=node.value, semicolon=node.semicolon)
            if isinstance(node, cst.ExceptHandler | cst.ExceptStarHandler) and isinstance(node.type, cst.Tuple):
                if not node.type.lpar:
                    return node.with_changes(
                        type=node.type.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                    )
            if isinstance(node, cst.LazyImport):
                space = cst.SimpleWhitespace(node.whitespace_after_lazy.value + node.whitespace_after_import.value)
                return cst.Import(names=node.names, semicolon=node.semicolon, whitespace_after_import=space)
            if isinstance(node, cst.LazyImportFrom):
                space = cst.SimpleWhitespace(node.whitespace_after_lazy.value + node.whitespace_after_from.value)
                return cst.ImportFrom(
                    module=node.module,
                    names=node.names,
                    relative=node.relative,
                    lpar=node.lpar,
                    rpar=node.rpar,
                    semicolon=node.semicolon,
                    whitespace_after_from=space,
                    whitespace_before_import=node.whitespace_before_import,
                    whitespace_after_import=node.whitespace_after_import,
                )
            if isinstance(node, cst.ListComp | cst.SetComp | cst.GeneratorExp) and isinstance(
                node.elt, cst.StarredElement
            ):
                return node.with_changes(elt=Raw(" " + self.code(node.elt)[1:]))
            if isinstance(node, cst.StarredDictComp):
                value = "  " + self.code(node.whitespace_before_value) + self.code(node.value)
                return cst.SetComp(
                    elt=Raw(value),
                    for_in=node.for_in,
                    lbrace=node.lbrace,
                    rbrace=node.rbrace,
                    lpar=node.lpar,
                    rpar=node.rpar,
                )
            return node

        def string_unit(self, node: Any) -> Raw:
            """The unit's call chain, keeping each replacement field's expression on its own line."""
            number = len(self.units)
            chain: list[str] = []
            parts: list[Part] = []
            kinds: set[str] = set()
            for piece in self.flatten(node):
                if isinstance(piece, str):  # the line breaks between two strings of a concatenation
                    chain.append(piece)
                    continue
                if isinstance(piece, cst.SimpleString):
                    value = literal(piece.value)
                    if not isinstance(value, str):
                        raise DownlevelError("bytes and an f-string in one concatenation")
                    parts.append(["text", value])
                    chain.append("\n" * piece.value.count("\n"))
                    continue
                kinds.add("t" if isinstance(piece, cst.TemplatedString) else "f")
                raw = "r" if "r" in piece.prefix else ""
                for content in piece.parts:
                    parts.append(self.content(content, raw, piece.end, chain))
            if len(kinds) > 1:
                raise DownlevelError("an f-string and a t-string in one concatenation")
            self.units.append({"kind": kinds.pop() if kinds else "f", "parts": parts})
            lpar = "".join(self.code(p) for p in node.lpar)
            rpar = "".join(self.code(p) for p in node.rpar)
            return Raw(f"{lpar}({self.stem}{number}{''.join(chain)}){rpar}")

        def flatten(self, node: cst.CSTNode) -> list[Any]:
            """The strings of an implicit concatenation in order, with the line breaks between them."""
            if not isinstance(node, cst.ConcatenatedString):
                return [node]
            between = "\n" * self.code(node.whitespace_between).count("\n")
            return [*self.flatten(node.left), between, *self.flatten(node.right)]

        def content(self, content: Any, raw: str, quote: str, chain: list[str]) -> Part:
            if isinstance(content, cst.FormattedStringText | cst.TemplatedStringText):
                chain.append("\n" * content.value.count("\n"))
                return ["text", decode_text(content.value, raw, quote)]
            before = self.code(content.whitespace_before_expression)
            expression = self.code(content.expression)
            equal = self.code(content.equal)
            after = self.code(content.whitespace_after_expression)
            breaks = "\n" * equal.count("\n")
            chain.append(f"(({before}{expression}{after}{breaks}))")
            spec = None
            if content.format_spec is not None:
                spec = [self.content(p, raw, quote, chain) for p in content.format_spec]
            debug = None
            if content.equal is not None:  # `f"{x = }"`: the text as written, less its comments (as 3.12 does)
                fields = (content.whitespace_before_expression, content.expression, content.equal)
                bare = [n.visit(WithoutComments()) for n in (*fields, content.whitespace_after_expression)]
                debug = "".join(self.code(n) for n in bare)
            return ["expr", debug, content.conversion, spec, expression.strip()]

    return Rewriter


def literal(code: str) -> str | bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an invalid escape in the reviewed code is its own business
        value = ast.literal_eval(code)
    assert isinstance(value, str | bytes)
    return value


def decode_text(text: str, raw: str, quote: str) -> str:
    """The value of an f-string's literal text: escapes applied, doubled braces halved.

    A sentinel letter goes before the closing quote, so that text ending in a backslash or in the quote
    character itself (`f'''a'{x}'''`) still makes a string literal; it is cut off again after."""
    value = literal(f"{raw}{quote}{text.replace('{{', '{').replace('}}', '}')}Q{quote}")
    assert isinstance(value, str)
    return value[:-1]


# --- splice: the service side, standard library only ----------------------------------------------------


def splice(tree: ast.Module, converted: Downlevelled) -> ast.Module:
    """Put the string units back into the tree the running `ast` built from `converted["text"]`."""
    spliced = _Splicer(converted["units"], converted["stem"]).visit(tree)
    assert isinstance(spliced, ast.Module)
    return ast.fix_missing_locations(spliced)


class _Splicer(ast.NodeTransformer):
    def __init__(self, units: list[Unit], stem: str) -> None:
        self.units = units
        self.root = re.compile(re.escape(stem) + r"(\d+)")

    def unit_number(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Name) and (match := self.root.fullmatch(node.id)):
            return int(match.group(1))
        return None

    def visit_Name(self, node: ast.Name) -> ast.AST:
        number = self.unit_number(node)
        return node if number is None else self.build(number, [], node, node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        links: list[ast.Call] = []  # outermost first
        root: ast.expr = node
        while isinstance(root, ast.Call) and len(root.args) == 1 and not root.keywords:
            links.append(root)
            root = root.func
        number = self.unit_number(root)
        if number is None:
            return self.generic_visit(node)
        slots = _count_slots(self.units[number]["parts"])
        if slots > len(links):
            raise DownlevelError(f"string unit {number} has {slots} fields but the text {len(links)}")
        inner = links[len(links) - slots :]  # the unit's own links; any before them call the string
        values = [self.visit(link.args[0]) for link in reversed(inner)]
        built: ast.expr = self.build(number, values, inner[0] if inner else root, root)
        for link in reversed(links[: len(links) - slots]):
            call = ast.Call(func=built, args=[self.visit(link.args[0])], keywords=[])
            built = ast.copy_location(call, link)
        return built

    def build(self, number: int, values: list[ast.AST], outer: ast.AST, root: ast.AST) -> ast.expr:
        unit = self.units[number]
        fields = iter(values)
        node: ast.expr
        if unit["kind"] == "t":
            node = _template(unit["parts"], fields, root)
        else:
            node = ast.JoinedStr(values=_joined(unit["parts"], fields, root))
        ast.copy_location(node, root)
        node.end_lineno = getattr(outer, "end_lineno", None)
        node.end_col_offset = getattr(outer, "end_col_offset", None)
        return node


def _count_slots(parts: list[Part]) -> int:
    return sum(1 + _count_slots(p[3] or []) for p in parts if p[0] == "expr")


def _located(node: ast.expr, at: ast.AST) -> ast.expr:
    return ast.copy_location(node, at)


def _joined(parts: list[Part], fields: Iterator[ast.AST], at: ast.AST) -> list[ast.expr]:
    """JoinedStr values as 3.12 builds them: adjacent text merged, empty text dropped."""
    out: list[ast.expr] = []

    def add_text(text: str) -> None:
        if not text:
            return
        if out and isinstance(out[-1], ast.Constant) and isinstance(out[-1].value, str):
            out[-1].value += text
        else:
            out.append(_located(ast.Constant(value=text), at))

    for part in parts:
        if part[0] == "text":
            add_text(part[1])
            continue
        _, debug, conversion, spec, _source = part
        value = next(fields)
        assert isinstance(value, ast.expr)
        if debug is not None:
            add_text(debug)
        if conversion is None and debug is not None and spec is None:
            conversion = "r"  # `f"{x=}"` shows repr(x) unless a format is given
        format_spec = None
        if spec is not None:
            format_spec = _located(ast.JoinedStr(values=_joined(spec, fields, value)), value)
        out.append(
            _located(
                ast.FormattedValue(
                    value=value, conversion=CONVERSIONS.get(conversion or "", -1), format_spec=format_spec
                ),
                value,
            )
        )
    return out


def _templatelib(name: str, at: ast.AST) -> ast.expr:
    module = ast.Attribute(
        value=_located(ast.Name(id="string", ctx=ast.Load()), at), attr="templatelib", ctx=ast.Load()
    )
    return _located(ast.Attribute(value=_located(module, at), attr=name, ctx=ast.Load()), at)


def _template(parts: list[Part], fields: Iterator[ast.AST], at: ast.AST) -> ast.expr:
    """`string.templatelib.Template(...)`: the strings and interpolations of a t-string, in order."""
    args: list[ast.expr] = []
    for part in parts:
        if part[0] == "text":
            if part[1]:
                args.append(_located(ast.Constant(value=part[1]), at))
            continue
        _, debug, conversion, spec, source = part
        value = next(fields)
        assert isinstance(value, ast.expr)
        if debug is not None:
            args.append(_located(ast.Constant(value=debug), at))
            conversion = conversion or ("r" if spec is None else None)
        format_spec: ast.expr = _located(ast.Constant(value=""), value)
        if spec is not None:
            format_spec = _located(ast.JoinedStr(values=_joined(spec, fields, value)), value)
        interpolation = ast.Call(
            func=_templatelib("Interpolation", value),
            args=[
                value,
                _located(ast.Constant(value=source), value),
                _located(ast.Constant(value=conversion), value),
                format_spec,
            ],
            keywords=[],
        )
        args.append(_located(interpolation, value))
    return _located(ast.Call(func=_templatelib("Template", at), args=args, keywords=[]), at)


# --- the converter process ------------------------------------------------------------------------------

_LENGTH = struct.Struct(">I")


def write_message(stream: Any, message: object) -> None:
    """One length-prefixed JSON message (the converter's protocol, both ways)."""
    body = json.dumps(message).encode("utf-8")
    stream.write(_LENGTH.pack(len(body)) + body)
    stream.flush()


def _read_exactly(stream: Any, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def serve() -> None:
    """Answer `{"source": text}` requests on stdin with `Downlevelled` or `{"error", "line"}` until EOF."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CONVERTER_MEMORY_BYTES, CONVERTER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # no limit to set here; the parent's deadline still holds
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (head := _read_exactly(stdin, _LENGTH.size)) is not None:
        body = _read_exactly(stdin, _LENGTH.unpack(head)[0])
        if body is None:
            return
        source = json.loads(body)["source"]
        try:
            answer: object = downlevel(source)
        except DownlevelError as exc:
            answer = {"error": exc.what, "line": exc.line}
        except (RecursionError, MemoryError) as exc:
            answer = {"error": f"too deeply nested for the reader ({type(exc).__name__})", "line": None}
        except Exception as exc:  # noqa: BLE001 - a defect of the rewrite is that file's parse error, not the end of the reader
            answer = {"error": f"the reader failed ({type(exc).__name__}: {str(exc)[:200]})", "line": None}
        write_message(stdout, answer)


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
