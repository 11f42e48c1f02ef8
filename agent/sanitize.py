"""Neutralising model-written text before it is posted to GitLab, and our hidden markers.

A model (or a reviewer quoting the code under review) must not be able to page people, inject
HTML, run quick actions, link to places nobody vetted, or forge our own markers. GitLab renders
notes as GitLab Flavored Markdown, so the text is split the way Markdown splits it: fenced code
blocks and inline code spans stay literal (GitLab turns nothing inside them into a mention, a tag
or a quick action) but are re-fenced by us so nothing can break out of them; everything else is
prose, where

- `@name`, `@all`, `@here` get a zero-width joiner after the `@` (GitLab's mention pattern needs a
  username character there), and so do references, in this project or another: `#12`, `!12`,
  `&12`, `$12`, `group/project#12`, `project!5`, `group/project@<sha>` — GitLab adds a "mentioned
  in" note to whatever a reference names, so none may land in another project;
- `&` and `<` become entities (no HTML tag, comment or entity survives; "a < b" still reads the same);
- stray backticks and backslashes are escaped, so no code span exists that we did not emit;
- a `/` starting a line is escaped (GitLab would run `/merge`, `/approve` as quick actions);
- Markdown links and images, reference definitions and bare URLs are removed unless the URL is on
  the caller's allowlist (link text is kept);
- bidi overrides and control characters are dropped, and the input is capped in length.

Our markers (`hidden_marker`, `SUMMARY_MARKER`) are added after neutralising, so model text can
never carry one: every `<!--` in code it wrote is broken as well.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from typing import Literal

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
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_BACKTICKS = re.compile(r"`+")
_LINE_START_SLASH = re.compile(r"(^|\n)([ \t]*)/")
# A mention (`@user`, `@all`, `@group/sub`): an `@` not preceded by an ASCII letter or digit (those
# are e-mail addresses, which GitLab does not treat as mentions either). `_` does not protect:
# Markdown drops it as an emphasis delimiter ("_@all_" renders as a bare "@all").
_MENTION_AT = re.compile(r"(?<![A-Za-z0-9])@")
# Issues, merge requests, epics (`&`, escaped to `&amp;` by then) and snippets, by number, with or
# without a project path before them: whatever precedes the sign, `group/proj#1` included (issue 11).
_REFERENCE = re.compile(r"([#!$]|&amp;)(?=\d)")
# A commit in another project: `group/project@9ba12248` (a bare `@` is a mention, handled above).
_COMMIT_REFERENCE = re.compile(r"(?<=[\w.\-/])@(?=[0-9a-fA-F]{7,40}\b)")
_URL_CHARS = r"[^\s<>()\[\]\"'`]+"
_LINK = re.compile(
    r"(?P<image>!?)\[(?P<text>[^\]\n]*)\]\((?P<url>[^)\s]*)(?:\s+\"[^\"\n]*\")?\)"
    rf"|(?P<bare>(?:https?|ftp)://{_URL_CHARS}|www\.{_URL_CHARS})",
    re.IGNORECASE,
)
_REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*(\S+).*$", re.MULTILINE)
_TRAILING_PUNCTUATION = ".,;:!?*_~"

SegmentKind = Literal["prose", "fence", "code"]


def url_allowed(url: str, allowed_urls: Collection[str]) -> bool:
    """Exact match, or under an allowlist entry that ends with "/" (a prefix)."""
    return url in allowed_urls or any(a.endswith("/") and url.startswith(a) for a in allowed_urls)


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


def _segments(text: str) -> Iterator[tuple[SegmentKind, str, str]]:
    """(kind, content, fence info) in order: fenced blocks by line, then code spans within the rest."""
    lines = text.split("\n")
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if opened is None or (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            yield from _inline_segments("\n".join(prose) + "\n")
            prose = []
        fence = opened.group(1)
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence (or the end: an unclosed fence runs to the end, as in Markdown)
        yield "fence", "\n".join(body), opened.group(2).strip()
    if prose:
        yield from _inline_segments("\n".join(prose))


def _inline_segments(text: str) -> Iterator[tuple[SegmentKind, str, str]]:
    """Prose and code spans of a text without fences. A run of n backticks opens a span that the
    next run of exactly n backticks on the same line closes; unmatched runs stay prose."""
    pos = 0
    runs = list(_BACKTICKS.finditer(text))
    k = 0
    while k < len(runs):
        opener = runs[k]
        if opener.start() < pos:
            k += 1
            continue
        closer = next(
            (
                r
                for r in runs[k + 1 :]
                if len(r.group(0)) == len(opener.group(0)) and "\n" not in text[opener.end() : r.start()]
            ),
            None,
        )
        if closer is None or closer.start() == opener.end():
            k += 1
            continue
        if opener.start() > pos:
            yield "prose", text[pos : opener.start()], ""
        content = text[opener.end() : closer.start()]
        if len(content) >= 2 and content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        yield "code", content, ""
        pos = closer.end()
        k = runs.index(closer) + 1
    if pos < len(text):
        yield "prose", text[pos:], ""


def _plain(text: str, *, at_line_start: bool) -> str:
    """Prose without links: escape what GitLab would turn into markup, mentions or actions."""
    text = text.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace("`", "\\`")
    text = _MENTION_AT.sub("@" + ZWJ, text)
    text = _REFERENCE.sub(lambda m: m.group(1) + ZWJ, text)
    text = _COMMIT_REFERENCE.sub("@" + ZWJ, text)
    if at_line_start:
        return _LINE_START_SLASH.sub(lambda m: f"{m.group(1)}{m.group(2)}\\/", text)
    return re.sub(r"(\n)([ \t]*)/", lambda m: f"{m.group(1)}{m.group(2)}\\/", text)


def _prose(text: str, allowed_urls: Collection[str], *, at_line_start: bool) -> str:
    def keep_definition(m: re.Match[str]) -> str:
        return m.group(0) if url_allowed(m.group(1).strip("<>"), allowed_urls) else ""

    text = _REFERENCE_DEFINITION.sub(keep_definition, text)
    out: list[str] = []
    pos = 0
    for m in _LINK.finditer(text):
        start_of_line = pos == 0 and at_line_start or (pos > 0 and text[pos - 1] == "\n")
        out.append(_plain(text[pos : m.start()], at_line_start=start_of_line))
        if m.group("bare"):
            url = m.group("bare").rstrip(_TRAILING_PUNCTUATION)
            tail = m.group("bare")[len(url) :]
            out.append(url if url_allowed(url, allowed_urls) else LINK_REMOVED)
            out.append(_plain(tail, at_line_start=False))
        else:
            label = _prose(m.group("text"), allowed_urls, at_line_start=False)  # may hold bare URLs
            url = m.group("url").strip("<>")
            if m.group("image"):
                out.append(f"[{label}]({url})" if url_allowed(url, allowed_urls) and label else label)
            elif url_allowed(url, allowed_urls):
                out.append(f"[{label}]({url})")
            else:
                out.append(label)
        pos = m.end()
    out.append(_plain(text[pos:], at_line_start=pos == 0 and at_line_start or (pos > 0 and text[pos - 1] == "\n")))
    return "".join(out)


def neutralise(text: str, *, allowed_urls: Collection[str] = frozenset(), max_chars: int = MAX_BODY_CHARS) -> str:
    """Model- or reviewer-written text made safe to post in a GitLab note (see the module docstring)."""
    text = _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    if len(text) > max_chars:
        text = text[:max_chars].rstrip() + TRUNCATED
    out: list[str] = []
    for kind, content, info in _segments(text):
        at_line_start = not out or out[-1].endswith("\n")
        if kind == "fence":
            if out and not out[-1].endswith("\n"):
                out.append("\n")
            out.append(code_block(content, info))
        elif kind == "code":
            out.append(inline_code(content))
        else:
            out.append(_prose(content, allowed_urls, at_line_start=at_line_start))
    return "".join(out).rstrip("\n")


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
