"""`slips:missing-comma`: two strings a missing comma joined into one.

`["text/html" "application/json"]` is a list of one MIME type nobody uses. Python joins adjacent
string literals, so the slip is silent until the joined value is looked for. The same joining is
also how long strings are wrapped on purpose, which is why ruff's ISC004 (every implicit
concatenation in a collection) is not used: it reports the wrapped sentence as well as the slip.

Reported: an element of a list, tuple or set display, or a positional argument of a call with at
least two positional arguments, that is two or more adjacent string literals where

- the literals are all of one kind (no `r"..."` beside `"..."`, no f-string beside a plain one:
  mixing kinds is a deliberate way to escape part of a pattern), and
- no joint falls on whitespace (a wrapped sentence breaks between words: `"a long " "message"`), and
- on one line the join is reported as it is; across lines only when the other elements are plain,
  single string literals (the display is a list of strings, and this element alone is two of them)
  and each joined part could stand as an element (none of them ends or starts with a character
  that only continues a value: `/`, `\\`, `,`, `=`, `&`, `|`, `-`, `_`, `.`, `:`, `%`, `{`).

Not caught: a missing comma in a display whose other elements are not all plain strings (names,
numbers, calls), a join whose parts meet on whitespace, a keyword argument's value
(`help="a" "b"` is usually a wrapped text), and a string that a missing `+` joined outside a collection.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from reviewers.analyzers.changed_file import Issue

RULE = "slips:missing-comma"
# A part that ends (or a next part that starts) with one of these continues a value wrapped on purpose
# (a URL, a path, a query string, a pattern), it does not stand as an element of its own.
CONTINUING = frozenset("/\\,=&|-_.:%{}+")
_STRING_PREFIX_CHARS = "rRbBuUfFtT"
# a closing quote, then only space, line breaks and comments, then an opening quote: every join has
# one (a single literal seldom does), so only these are tokenized
_MAYBE_JOINED = re.compile(r"[\"'](?:\s|#[^\n]*)*[rRbBuUfFtT]{0,2}[\"']")


def _string_tokens(source: str) -> list[tokenize.TokenInfo] | None:
    try:  # in parentheses, so that its lines continue one another as they do inside the display
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({source}\n)").readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    kept = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER)]
    if len(kept) < 2 or kept[0].string != "(" or kept[-1].string != ")":
        return None
    kept = kept[1:-1]
    if any(t.type != tokenize.STRING for t in kept):
        return None  # an f-string the running Python tokenizes in pieces, or something else than strings
    return kept


def _prefix(token: str) -> str:
    return "".join(c for c in token[: len(token) - len(token.lstrip(_STRING_PREFIX_CHARS))].lower() if c != "u")


def _value(token: str) -> str | None:
    if "f" in _prefix(token) or "t" in _prefix(token):
        body = token.lstrip(_STRING_PREFIX_CHARS)
        quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
        return body[len(quote) : len(body) - len(quote)]
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _segment(lines: list[str], node: ast.expr) -> str | None:
    if node.end_lineno is None or node.end_col_offset is None:
        return None
    if not (1 <= node.lineno <= node.end_lineno <= len(lines)):
        return None
    chunk = lines[node.lineno - 1 : node.end_lineno]
    if len(chunk) == 1:
        return chunk[0][node.col_offset : node.end_col_offset]
    return "\n".join([chunk[0][node.col_offset :], *chunk[1:-1], chunk[-1][: node.end_col_offset]])


def _char_before(lines: list[str], line: int, col: int) -> str:
    text = lines[line - 1][:col].rstrip()
    while not text and line > 1:
        line -= 1
        text = lines[line - 1].split("#", 1)[0].rstrip()
    return text[-1:] if text else ""


def _char_after(lines: list[str], line: int, col: int) -> str:
    text = lines[line - 1][col:].split("#", 1)[0].strip()
    while not text and line < len(lines):
        line += 1
        text = lines[line - 1].split("#", 1)[0].strip()
    return text[:1]


def _parenthesised(lines: list[str], node: ast.expr) -> bool:
    """Whether the node stands in parentheses of its own (an element or argument is followed by a
    comma or its container's closing bracket, so `(` before and `)` after are the node's)."""
    if node.end_lineno is None or node.end_col_offset is None:
        return False
    return (
        _char_before(lines, node.lineno, node.col_offset) == "("
        and _char_after(lines, node.end_lineno, node.end_col_offset) == ")"
    )


def _plain_string(lines: list[str], node: ast.expr) -> bool:
    if not isinstance(node, ast.Constant | ast.JoinedStr) or (
        isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes)
    ):
        return False
    source = _segment(lines, node)
    tokens = _string_tokens(source) if source is not None else None
    return tokens is not None and len(tokens) == 1


def _joined(lines: list[str], node: ast.expr) -> list[tokenize.TokenInfo] | None:
    """The literals of a string joined from two or more, or None."""
    if not isinstance(node, ast.Constant | ast.JoinedStr):
        return None
    if isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes):
        return None
    source = _segment(lines, node)
    if source is None or not _MAYBE_JOINED.search(source) or _parenthesised(lines, node):
        return None  # one literal, or parenthesised on its own: the join is written as meant
    tokens = _string_tokens(source)
    return tokens if tokens is not None and len(tokens) >= 2 else None


def _slip(lines: list[str], node: ast.expr, siblings: list[ast.expr]) -> bool:
    tokens = _joined(lines, node)
    if tokens is None or len({_prefix(t.string) for t in tokens}) != 1:
        return False
    values = [_value(t.string) for t in tokens]
    if any(v is None or v == "" for v in values):
        return False
    parts = [v for v in values if v is not None]
    for before, after in zip(parts, parts[1:], strict=False):
        if before[-1].isspace() or after[0].isspace():
            return False  # a text wrapped between words
    one_line = tokens[0].start[0] == tokens[-1].end[0]
    if one_line:
        return True
    if len(siblings) < 1 or not all(_plain_string(lines, s) for s in siblings):
        return False
    return all(p[0] not in CONTINUING and p[-1] not in CONTINUING for p in parts)


def missing_comma_issues(nodes: list[ast.AST], tree: ast.Module, lines: list[str]) -> list[Issue]:
    issues: list[Issue] = []
    for node in nodes:
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            elements = list(node.elts)
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            elements = list(node.args)
        else:
            continue
        for element in elements:
            siblings = [e for e in elements if e is not element]
            if _slip(lines, element, siblings):
                issues.append(
                    Issue(
                        element.lineno,
                        RULE,
                        "medium",
                        "Two strings joined by a missing comma",
                        "These adjacent string literals are one element: Python joins them, so the "
                        f"{'collection' if not isinstance(node, ast.Call) else 'call'} gets one value where two were "
                        "written. Add the missing comma, or wrap the join in parentheses if it is meant.",
                        end_line=element.end_lineno,
                        kind="missing-comma",
                        confidence="high",
                    )
                )
    return issues
