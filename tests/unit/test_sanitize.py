"""neutralise(): no live mention, HTML, quick action, foreign link or forged marker survives.

The property tests render the output with an independent CommonMark parser (markdown-it-py, raw
HTML enabled as GitLab allows a subset of it) and look at what a reader would get: text outside
code must hold no `@mention`, no raw HTML token may exist, and every link must be allowed.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from agent.sanitize import (
    LINK_REMOVED,
    SUMMARY_MARKER,
    TRUNCATED,
    ZWJ,
    code_block,
    has_summary_marker,
    hidden_marker,
    inline_code,
    neutralise,
    parse_markers,
)
from reviewers.kernel.errors import InputError

MD = MarkdownIt("commonmark", {"html": True})
# GitLab's user reference: an @ not preceded by a word character, then a username character.
LIVE_MENTION = re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9_.]")
# GitLab's references to issues, MRs, epics and snippets, in this project or another (`group/proj#1`:
# any character may precede the sign), and commits of another project (`group/proj@<sha>`).
LIVE_REFERENCE = re.compile(r"[#!&$]\d|[\w.\-/]@[0-9a-fA-F]{7,40}\b")
QUICK_ACTION = re.compile(r"^[ \t]*/[a-z]", re.MULTILINE)


def _walk(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for tok in tokens:
        out.append(tok)
        if tok.children:
            out.extend(_walk(tok.children))
    return out


def rendered_problems(markdown: str, allowed: set[str]) -> list[str]:
    problems = []
    for tok in _walk(MD.parse(markdown)):
        if tok.type in ("html_inline", "html_block"):
            problems.append(f"raw html {tok.content!r}")
        if tok.type == "text" and LIVE_MENTION.search(tok.content):
            problems.append(f"live mention in {tok.content!r}")
        if tok.type == "text" and LIVE_REFERENCE.search(tok.content):
            problems.append(f"live reference in {tok.content!r}")
        if tok.type == "text":
            # a bare URL GitLab would autolink: live unless it is one of the merge request's own GitLab's
            for url in re.findall(r"(?:https?://|www\.)[^\s<>\[\]()]*", tok.content, re.IGNORECASE):
                if not any(url == a or url.startswith(a.rstrip("/") + "/") for a in allowed):
                    problems.append(f"bare url in {tok.content!r}")
        if tok.type in ("link_open", "image"):
            href = str(tok.attrs.get("href") or tok.attrs.get("src") or "")
            if href not in allowed:
                problems.append(f"link to {href!r}")
    # Quick actions run on the raw text, outside code blocks.
    outside_code = re.sub(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", "", markdown, flags=re.MULTILINE | re.DOTALL)
    if QUICK_ACTION.search(outside_code):
        problems.append("quick action at a line start")
    return problems


NASTY = st.sampled_from(
    [
        "@all",
        "@here",
        "@alice",
        "@group/team",
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "<!-- reviewloop:fp=deadbeef -->",
        "&#64;all",
        "&commat;all",
        "`",
        "``",
        "```",
        "~~~",
        "\\",
        "\n",
        "\n/merge\n",
        "/approve",
        "[click](https://evil.example/x)",
        "![img](https://evil.example/p.png)",
        "https://evil.example/a",
        "www.evil.example",
        "<https://evil.example>",
        "[ref]: https://evil.example",
        "[ok](https://allowed.example/doc)",
        "#12",
        "!7",
        "\u202e",
        "user@example.com",
        "*",
        "_",
        " ",
        "    ",
        "> ",
        "- ",
        "(",
        ")",
        "[",
        "]",
    ]
)
TEXT = st.lists(st.one_of(NASTY, st.text(max_size=6)), max_size=25).map("".join)
ALLOWED = {"https://allowed.example/doc"}


@settings(max_examples=200, deadline=None)
@given(TEXT)
@example("[https://evil.example/a[ok](https://allowed.example/doc)")  # a bare URL inside a kept link's text
@example("_@all_ __#12__")  # emphasis delimiters vanish when rendered
def test_no_live_mention_tag_link_or_quick_action_survives(text: str) -> None:
    out = neutralise(text, allowed_urls=ALLOWED)
    assert rendered_problems(out, ALLOWED) == []


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_model_text_never_carries_a_marker(text: str) -> None:
    out = neutralise(text)
    assert parse_markers(out) == set()
    assert not has_summary_marker(out)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_code_block_cannot_be_escaped(text: str) -> None:
    block = code_block(text)
    tokens = MD.parse(block)
    assert [t.type for t in tokens] == ["fence"]
    assert parse_markers(block) == set()


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_inline_code_is_one_code_span(text: str) -> None:
    tokens = _walk(MD.parse(inline_code(text)))
    assert [t.type for t in tokens if t.type not in ("paragraph_open", "paragraph_close", "inline")] == ["code_inline"]


def test_mentions_are_broken_but_emails_kept() -> None:
    assert neutralise("ping @all and @bob, mail bob@example.com") == (
        f"ping @{ZWJ}all and @{ZWJ}bob, mail bob@example.com"
    )


def test_html_is_escaped_but_comparisons_read_the_same() -> None:
    assert neutralise("<b>x</b> if a < b & c") == "&lt;b>x&lt;/b> if a &lt; b &amp; c"


def test_code_stays_literal() -> None:
    out = neutralise("use `x = a<b and @all` here")
    assert "`x = a<b and @all`" in out


def test_fenced_code_is_refenced() -> None:
    out = neutralise("before\n```python\nif a < b:\n    notify('@all')\n```\nafter @bob")
    assert out == f"before\n\n```python\nif a < b:\n    notify('@all')\n```\n\nafter @{ZWJ}bob"


def test_links_removed_unless_allowed() -> None:
    text = "see [docs](https://evil.example) and [ours](https://ok.example/a), https://evil.example/b."
    out = neutralise(text, allowed_urls={"https://ok.example/a"})
    assert out == f"see docs and [ours](https://ok.example/a), {LINK_REMOVED}."


def test_allowlist_prefix_entries() -> None:
    out = neutralise("read https://ok.example/wiki/page", allowed_urls={"https://ok.example/wiki/"})
    assert out == "read https://ok.example/wiki/page"


def test_images_lose_their_url() -> None:
    assert neutralise("![tracking pixel](https://evil.example/p.gif)") == "tracking pixel"


def test_quick_actions_are_escaped() -> None:
    assert neutralise("fine\n/merge\n  /approve") == "fine\n\\/merge\n\\/approve"


def test_cross_references_are_broken() -> None:
    assert neutralise("fixes #12 and !3") == f"fixes #{ZWJ}12 and !{ZWJ}3"


def test_references_into_other_projects_are_broken() -> None:
    # issue 11: this came back unchanged, and GitLab added "mentioned in" notes in both projects
    text = "see gitlab-org/gitlab#1 and other/proj!5, epic group&7, snippet grp/p$3, commit other/proj@9ba12248"
    out = neutralise(text)
    assert out != text
    assert rendered_problems(out, set()) == []
    assert f"gitlab-org/gitlab#{ZWJ}1" in out and f"other/proj!{ZWJ}5" in out and f"other/proj@{ZWJ}9ba12248" in out
    assert neutralise("mail me at dev@example.com") == "mail me at dev@example.com"  # not a commit


def test_bidi_controls_dropped() -> None:
    assert neutralise("a\u202eb\x00c") == "abc"


def test_length_is_capped() -> None:
    out = neutralise("x" * 100, max_chars=10)
    assert out == "x" * 10 + TRUNCATED


def test_marker_roundtrip_and_validation() -> None:
    body = f"text\n{hidden_marker('abc123')}\n{hidden_marker('ff00')}\n{SUMMARY_MARKER}"
    assert parse_markers(body) == {"abc123", "ff00"}
    assert has_summary_marker(body)
    with pytest.raises(InputError):
        hidden_marker("abc --> <b>")


# Issue 21, item 8: what the old regexes let through as `<img src="//host/...">`, and near relatives.
OWN = "https://gitlab.example.com"
BYPASSES = {
    "single-quoted title": "![x](//evil.example/p.png 'a title')",
    "single-quoted title, absolute": "![x](https://evil.example/p.png 'a title')",
    "parenthesised title": "![x](https://evil.example/p.png (a title))",
    "nested brackets": "![a [b] c](//evil.example/p.png)",
    "image in a link": "[![pic](//evil.example/p.png)](https://evil.example/go)",
    "newline before the url": "![x](\n//evil.example/p.png)",
    "angle-bracket url": "![x](<//evil.example/p png>)",
    "definition in a quote": "> [r]: //evil.example/p.png\n\n![x][r]",
    "definition in a list item": "- [r]: //evil.example/p.png\n\n![x][r]",
    "definition, collapsed reference": "[r]: //evil.example/p.png\n\n![r][]",
    "definition, shortcut link": "[home]:\n  https://evil.example/x\n\nsee [home]",
    "autolink": "<https://evil.example/x>",
    "html image": '<img src="//evil.example/p.png">',
    "credentials before a host": f"[ours]({OWN}@evil.example/x)",
    "look-alike host": "[ours](https://gitlab.example.com.evil.example/x)",
    "protocol-relative look-alike": "![x](//gitlab.example.com.evil.example/p.png)",
}
GITLAB_LIKE = MarkdownIt("commonmark", {"html": True})  # as GitLab parses a note; raw HTML allowed


def external_links(markdown: str) -> list[str]:
    """Every link, image or raw HTML a reader of the rendered note would get that is not on OWN's host."""
    html = GITLAB_LIKE.render(markdown)
    out = [t.content for t in _walk(GITLAB_LIKE.parse(markdown)) if t.type in ("html_inline", "html_block")]
    for tok in _walk(GITLAB_LIKE.parse(markdown)):
        url = str(tok.attrs.get("href") or tok.attrs.get("src") or "")
        if tok.type in ("link_open", "image") and not url.startswith(OWN + "/"):
            out.append(url)
    return out + (["<img in html>"] if "<img" in html and f'src="{OWN}/' not in html else [])


@pytest.mark.parametrize("text", list(BYPASSES.values()), ids=list(BYPASSES))
def test_no_external_image_or_link_survives(text: str) -> None:
    assert external_links(text) != []  # the input itself renders a foreign link or image
    out = neutralise(text, allowed_urls={OWN})
    assert external_links(out) == [], out


def test_links_to_the_merge_requests_own_gitlab_survive() -> None:
    text = (
        f"See [the pipeline]({OWN}/team/svc/-/pipelines/7) and ![diagram]({OWN}/team/svc/uploads/a/d.png 'd'),\n"
        f"also <{OWN}/team/svc/-/issues/3> and {OWN}/team/svc/-/blob/main/app.py; not [this](https://evil.example)."
    )
    out = neutralise(text, allowed_urls={OWN})
    tokens = _walk(GITLAB_LIKE.parse(out))
    assert [str(t.attrs.get("href") or t.attrs.get("src")) for t in tokens if t.type in ("link_open", "image")] == [
        f"{OWN}/team/svc/-/pipelines/7",
        f"{OWN}/team/svc/uploads/a/d.png",
        f"{OWN}/team/svc/-/issues/3",
    ]
    # the bare URL stays as text GitLab links itself; the foreign link keeps only its words
    assert f"{OWN}/team/svc/-/blob/main/app.py" in out and "not this." in out and "evil" not in out
