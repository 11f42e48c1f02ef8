"""Neutralising model-written text before it is posted to GitLab, and our hidden markers.

A model (or a reviewer quoting the code under review) must not be able to page people, inject
HTML, run quick actions, link to places nobody vetted, or forge our own markers. GitLab renders
notes as GitLab Flavored Markdown, so the text is parsed by a CommonMark parser (markdown-it-py,
with the bare-URL autolinks GFM adds) and written back from the parser's tree: what a link or an
image is, is what the parser says, never what a regular expression guessed. (Regexes missed a
single-quoted title, nested brackets, a newline before the URL and a reference definition inside a
quote or a list item, and GitLab showed `<img src="//host/...">`: issue 21.) The structure stays
(paragraphs, lists, quotes, headings, emphasis); fenced and indented code and code spans stay
literal but are re-fenced by us so nothing can break out of them; in every piece of text

- `@name`, `@all`, `@here` get a zero-width joiner after the `@` (GitLab's mention pattern needs a
  username character there), and so do references, in this project or another: `#12`, `!12`,
  `&12`, `$12`, `group/project#12`, `project!5`, `group/project@<sha>` — GitLab adds a "mentioned
  in" note to whatever a reference names, so none may land in another project;
- `&` and `<` become entities (no HTML tag, comment or entity survives; "a < b" still reads the same),
  and raw HTML the parser found is written out as such text;
- backticks, backslashes and brackets are escaped, so no code span or link exists that we did not emit;
- a `/` starting a line is escaped (GitLab would run `/merge`, `/approve` as quick actions);
- links and images are kept only when `url_allowed` (in service: the merge request's own GitLab,
  compared by parsed scheme, host and port); otherwise a link keeps its words, an image its alt
  text, a bare URL becomes LINK_REMOVED, and a URL-like rest of text gets a zero-width joiner so no
  other autolinker makes it a link;
- bidi overrides and control characters are dropped, and the input is capped in length.

Our markers (`hidden_marker`, `SUMMARY_MARKER`) are added after neutralising, so model text can
never carry one: every `<!--` in code it wrote is broken as well.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from reviewers.kernel.errors import InputError

MAX_BODY_CHARS = 6000  # GitLab allows 1 MB per note; a finding longer than this is not read anyway
ZWJ = "\u200d"
TRUNCATED = " … (truncated)"
LINK_REMOVED = "(link removed)"
SUMMARY_MARKER = "<!-- reviewloop:summary -->"

_FP = r"[0-9A-Za-z_-]{1,64}"
_MARKER_RE = re.compile(rf"<!-- reviewloop:fp=({_FP}) -->")
_FP_RE = re.compile(rf"{_FP}\Z")

# C0 controls except tab and newline, DEL, C1 controls, and the bidi embedding/override/isolate
# characters that make text display in another order than it is read ("trojan source").
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_BACKTICKS = re.compile(r"`+")
# A mention (`@user`, `@all`, `@group/sub`): an `@` not preceded by an ASCII letter or digit (those
# are e-mail addresses, which GitLab does not treat as mentions either). `_` does not protect:
# Markdown drops it as an emphasis delimiter ("_@all_" renders as a bare "@all").
_MENTION_AT = re.compile(r"(?<![A-Za-z0-9])@")
# Issues, merge requests, epics (`&`, escaped to `&amp;` by then) and snippets, by number, with or
# without a project path before them: whatever precedes the sign, `group/proj#1` included (issue 11).
_REFERENCE = re.compile(r"([#!$]|&amp;)(?=\d)")
# A commit in another project: `group/project@9ba12248` (a bare `@` is a mention, handled above).
_COMMIT_REFERENCE = re.compile(r"(?<=[\w.\-/])@(?=[0-9a-fA-F]{7,40}\b)")


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL without credentials; None for anything else
    (relative, protocol-relative, `javascript:`, `data:`, `https://ours@evil.example`, a bad port)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or parts.username is not None or "\\" in parts.netloc:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def url_allowed(url: str, allowed_urls: Collection[str]) -> bool:
    """Whether a link may stay: `url` is an allowlist entry, or lies under an entry that ends with "/"
    (a prefix), or is on the host of an entry that is a bare origin (`https://gitlab.example.com`,
    the merge request's own GitLab). Hosts are compared parsed, never as strings."""
    target = _origin(url)
    if target is None:
        return False
    for entry in allowed_urls:
        if _origin(entry) != target:
            continue
        path = urlsplit(entry).path
        if url == entry or (entry.endswith("/") and url.startswith(entry)) or path in ("", "/"):
            return True
    return False


def _break_comments(code: str) -> str:
    return code.replace("<!--", f"<!{ZWJ}--")


def code_block(text: str, info: str = "") -> str:
    """`text` as a fenced code block nothing inside can close early: the fence is longer than any
    backtick run in it. Ends with a newline."""
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    info = re.sub(r"[^\w+.-]", "", info)[:20]
    body = _break_comments(text.replace("\r", ""))
    if body and not body.endswith("\n"):
        body += "\n"
    return f"{fence}{info}\n{body}{fence}\n"


def inline_code(text: str) -> str:
    """`text` as one inline code span (newlines become spaces, as Markdown would show them)."""
    text = _break_comments(text.replace("\r", "").replace("\n", " "))
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


# The parser GitLab's renderer agrees with on what is a link: CommonMark, plus the autolinks of bare
# URLs that GitLab adds (GFM). Fuzzy matches are found so that "www." ones are, but only those with a
# scheme or "www." count: GitLab does not link `views.py`.
_MARKDOWN = MarkdownIt("commonmark", {"linkify": True}).enable("linkify")
assert _MARKDOWN.linkify is not None  # linkify-it-py is a dependency
_MARKDOWN.linkify.set({"fuzzy_link": True, "fuzzy_email": False})
_LINK_STARTS = ("http://", "https://", "ftp://", "www.")


def _escape_text(text: str, *, at_line_start: bool) -> str:
    """Text the parser read as text, written so that GitLab reads it as text again: no HTML, entity,
    code span, link bracket, mention, reference, quick action or autolink can form from it."""
    text = text.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace("`", "\\`")
    text = text.replace("[", "\\[").replace("]", "\\]")
    # what the parser did not take for a link must not become one in another autolinker
    text = text.replace("://", f":{ZWJ}//").replace("www.", f"www{ZWJ}.").replace("WWW.", f"WWW{ZWJ}.")
    text = _MENTION_AT.sub("@" + ZWJ, text)
    text = _REFERENCE.sub(lambda m: m.group(1) + ZWJ, text)
    text = _COMMIT_REFERENCE.sub("@" + ZWJ, text)
    if at_line_start:
        stripped = text.lstrip(" \t")
        if stripped.startswith("/") or stripped.startswith("~~~"):  # a quick action; a tilde fence
            text = text[: len(text) - len(stripped)] + "\\" + stripped
    return text


class _Renderer:
    """Markdown back from the parser's tree: structure kept, every leaf escaped, links decided."""

    def __init__(self, allowed_urls: Collection[str]) -> None:
        self.allowed_urls = allowed_urls

    def blocks(self, nodes: Sequence[SyntaxTreeNode], *, tight: bool = False) -> str:
        return ("\n" if tight else "\n\n").join(self.block(node, tight=tight) for node in nodes)

    def block(self, node: SyntaxTreeNode, *, tight: bool) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.inline(node)
        if kind == "heading":
            return f"{node.markup if node.markup.startswith('#') else '#' * int(node.tag[1:])} {self.inline(node)}"
        if kind in ("fence", "code_block"):
            return code_block(node.content, node.info.strip().split(" ")[0] if kind == "fence" else "").rstrip("\n")
        if kind == "hr":
            return "***"
        if kind == "html_block":  # shown as the text it is, never as HTML
            return "\n".join(_escape_text(line, at_line_start=True) for line in node.content.rstrip("\n").split("\n"))
        if kind == "blockquote":
            return _prefix_lines(self.blocks(node.children), "> ", "> ")
        if kind in ("bullet_list", "ordered_list"):
            items_tight = _is_tight(node)
            number = int(str(node.attrs.get("start", 1)))
            items: list[str] = []
            for offset, item in enumerate(node.children):
                marker = f"{number + offset}{node.markup} " if kind == "ordered_list" else f"{node.markup} "
                body = self.blocks(item.children, tight=items_tight) or ""
                items.append(_prefix_lines(body, marker, " " * len(marker)))
            return ("\n" if items_tight else "\n\n").join(items)
        return _escape_text(node.content, at_line_start=True)  # a block CommonMark may add later: as text

    def inline(self, node: SyntaxTreeNode) -> str:
        out: list[str] = []
        for child in node.children:
            out.append(self.inline_node(child, at_line_start=not out or out[-1].endswith("\n")))
        return "".join(out)

    def inline_node(self, node: SyntaxTreeNode, *, at_line_start: bool) -> str:
        kind = node.type
        if kind == "inline":
            return self.inline(node)
        if kind == "text":
            return _escape_text(node.content, at_line_start=at_line_start)
        if kind == "softbreak":
            return "\n"
        if kind == "hardbreak":
            return "\\\n"
        if kind == "code_inline":
            return inline_code(node.content)
        if kind == "html_inline":
            return _escape_text(node.content, at_line_start=at_line_start)
        if kind in ("em", "strong"):
            return f"{node.markup}{self.inline(node)}{node.markup}"
        if kind == "link":
            return self.link(node, at_line_start=at_line_start)
        if kind == "image":
            src = str(node.attrs.get("src", ""))
            alt = self.inline(node)
            return f"![{alt}]({_destination(src)})" if alt and url_allowed(src, self.allowed_urls) else alt
        return _escape_text(node.content, at_line_start=at_line_start)

    def link(self, node: SyntaxTreeNode, *, at_line_start: bool) -> str:
        href = str(node.attrs.get("href", ""))
        label = self.inline(node)
        if node.markup in ("linkify", "autolink"):
            shown = "".join(c.content for c in node.children)
            if node.markup == "linkify" and not shown.lower().startswith(_LINK_STARTS):
                return _escape_text(shown, at_line_start=at_line_start)  # `views.py`: GitLab shows it as text
            if not url_allowed(href, self.allowed_urls):
                return LINK_REMOVED
            return f"<{href}>" if node.markup == "autolink" else shown
        return f"[{label}]({_destination(href)})" if url_allowed(href, self.allowed_urls) else label


def _is_tight(node: SyntaxTreeNode) -> bool:
    """A list whose paragraphs the parser marked hidden: its items are written one per line."""
    return all(
        child.type != "paragraph" or (child.nester_tokens is not None and child.nester_tokens.opening.hidden)
        for item in node.children
        for child in item.children
    )


def _prefix_lines(text: str, first: str, rest: str) -> str:
    """`text` inside a container: its first line after `first` (a list marker, "> "), the others after
    `rest`; a blank line keeps only what a container needs ("" in a list item, ">" in a quote)."""
    out: list[str] = []
    for i, line in enumerate(text.split("\n")):
        prefix = first if i == 0 else rest
        out.append(prefix + line if line or i == 0 else prefix.rstrip())
    return "\n".join(out)


def _destination(url: str) -> str:
    """A link destination that ends where we say: in angle brackets when it holds spaces or parentheses."""
    return f"<{url}>" if any(c in url for c in " ()<>") else url


def neutralise(text: str, *, allowed_urls: Collection[str] = frozenset(), max_chars: int = MAX_BODY_CHARS) -> str:
    """Model- or reviewer-written text made safe to post in a GitLab note (see the module docstring)."""
    text = _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    if len(text) > max_chars:
        text = text[:max_chars].rstrip() + TRUNCATED
    tree = SyntaxTreeNode(_MARKDOWN.parse(text))
    return _Renderer(allowed_urls).blocks(tree.children).rstrip("\n")


def hidden_marker(fingerprint: str) -> str:
    """Our invisible marker naming a finding's fingerprint; added after `neutralise`."""
    if not _FP_RE.match(fingerprint):
        raise InputError(f"a fingerprint must be 1-64 characters of [0-9A-Za-z_-], not {fingerprint!r}")
    return f"<!-- reviewloop:fp={fingerprint} -->"


def parse_markers(body: str) -> set[str]:
    """The fingerprints named by our markers in a note body."""
    return set(_MARKER_RE.findall(body))


def has_summary_marker(body: str) -> bool:
    return SUMMARY_MARKER in body
