"""Line patterns for security problems that look alike in every language.

bandit reads only Python, and only complete files; a review also sees JavaScript, Go, shell, YAML,
and Python rebuilt from diff hunks. These rules read one added line at a time. Rules marked
`python_ast` are done more precisely by `python_security` when the Python file parses, so they are
used for Python only as the fallback.

Severity policy: each rule's severity is in its `LineRule` below (code execution, injection, TLS
and JWT verification off: high; CORS open, CSRF off, raw HTML: medium). A line pattern cannot see
where a value comes from, so its findings carry medium confidence.
TLS verification switched off on a line that connects only to this machine (`localhost`,
`127.0.0.1`, `::1`: a container health check of its own self-signed server) is not reported.
Documentation (Markdown, reStructuredText, plain text) is not read by these rules: `verify=False` in
a changelog entry or a doc example tells a reader about an option, it runs nowhere. (Secrets are
still searched there by the secret scanner: a live key is one wherever it is pasted.)

Raw HTML (`patterns:raw-html`) is what a template or `mark_safe` emits without escaping: a `|safe`
whose filter chain escaped or serialised the value first (`|force_escape|safe`, `|tojson|safe`,
`|escape|safe`, `|e|safe`, `|escapejs|safe`) and a `mark_safe(...)`/`Markup(...)` of an escaping call
(`escape`, `conditional_escape`, `format_html`, `json_script`) emit escaped text, not raw HTML. A line
the change only re-indented or moved within the file (its text, whitespace collapsed, is among the
file's removed lines) emits what it did before: not a new finding. A rule's exception (a safe
loader) is read on the whole call, the lines that continue its brackets included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.kernel.contracts import Severity
from reviewers.paths import DOC_LANGUAGES, language_of

# Text inside a string that reads as an SQL statement.
_SQL_SHAPE = (
    r"\b(?:select\b.+\bfrom|insert\s+into|update\b.+\bset\b|delete\s+from|replace\s+into|"
    r"(?:drop|create|alter|truncate)\s+table|merge\s+into)\b"
)
SQL_SHAPE = re.compile(_SQL_SHAPE, re.IGNORECASE)
# Ways a value is spliced into a string literal, across languages.
INTERPOLATION = re.compile(
    r"""(?:\bf["']|\$\{|["']\s*\+\s*\w|\w\s*\+\s*["']|\.format\(|["']\s*%\s*[\w(]|Sprintf\(|#\{|String\.format\(|"""
    r"""["']\s*\.\s*\$|\$[a-z_]\w*)"""
)
_VARIABLE_COMMAND = re.compile(r"\b(?:system|popen|exec|execSync|shell_exec|passthru)\s*\(\s*[A-Za-z_$]")
MAX_RULE_LINE_CHARS = 500  # past this a line is data or minified code; `.*` in a rule would match anything
_COMMENT = re.compile(r"^\s*(?:#|//|/\*|\*|--|;)")


@dataclass(frozen=True, slots=True)
class LineRule:
    rule: str
    kind: str
    severity: Severity
    pattern: re.Pattern[str]
    title: str
    body: str
    unless: re.Pattern[str] | None = None
    python_ast: bool = False  # python_security covers this rule for Python files that parse
    cwe: str | None = None
    languages: frozenset[str] | None = None  # only files of these languages (None: every language)


LINE_RULES: tuple[LineRule, ...] = (
    LineRule(
        "patterns:tls-verify-disabled",
        "tls-verify",
        "high",
        re.compile(
            r"\bverify(?:_ssl|_certs?)?\s*[=:]\s*False\b|_create_unverified_context|\bCERT_NONE\b|"
            r"check_hostname\s*=\s*False|rejectUnauthorized['\"]?\s*:\s*false|InsecureSkipVerify\s*:\s*true|"
            r"NODE_TLS_REJECT_UNAUTHORIZED\W+0|\bcurl\b.*\s(?:-k|--insecure)\b|--no-check-certificate|"
            r"strict-ssl\W+false|\bsslmode\s*=\s*disable\b"
        ),
        "TLS certificate verification disabled",
        "Without certificate checks anyone on the network path can impersonate the server and read or "
        "change the traffic, credentials included. Fix the trust store (e.g. a CA bundle) instead.",
        python_ast=True,  # python_auth: only when unconditional, not a user's opt-out the code implements
        cwe="CWE-295",
    ),
    LineRule(
        "patterns:sql-interpolation",
        "sql",
        "high",
        re.compile(r"[\"'`].*" + _SQL_SHAPE, re.IGNORECASE),
        "SQL statement built by string interpolation",
        "Values spliced into SQL text let a crafted input change the statement (SQL injection). "
        "Pass them as bound parameters of the driver instead.",
        python_ast=True,
        cwe="CWE-89",
    ),
    LineRule(
        "patterns:shell-interpolation",
        "shell",
        "high",
        re.compile(
            r"\bos\.(?:system|popen)\s*\(|shell\s*=\s*True|child_process\.exec(?:Sync)?\s*\(|\bexecSync\s*\(|"
            r"\b(?:shell_exec|passthru|system|popen)\s*\(\s*\$|exec\.Command\(\s*\"(?:ba)?sh\"\s*,\s*\"-c\""
        ),
        "Command line built from a variable and run through a shell",
        "A value containing shell metacharacters (`;`, `$()`, spaces) runs arbitrary commands. Pass an "
        "argument list without a shell, or quote the value (shlex.quote).",
        python_ast=True,
        cwe="CWE-78",
    ),
    # Ruby's backticks run a shell; elsewhere `` `#{issue}` `` is text (an RST link in a TOML string,
    # a Markdown code span in a YAML one).
    LineRule(
        "patterns:shell-interpolation",
        "shell",
        "high",
        re.compile(r"`[^`]*#\{"),
        "Command line built from a variable and run through a shell",
        "A value containing shell metacharacters (`;`, `$()`, spaces) runs arbitrary commands. Pass an "
        "argument list to system() without a shell, or quote the value (Shellwords.escape).",
        cwe="CWE-78",
        languages=frozenset({"ruby"}),
    ),
    LineRule(
        "patterns:unsafe-deserialization",
        "deserialization",
        "high",
        re.compile(
            r"\b(?:c?[Pp]ickle|dill|marshal|jsonpickle)\.(?:loads?|Unpickler|decode)\b|\bshelve\.open\b|"
            r"\byaml\.(?:unsafe_)?load(?:_all)?\s*\(|\bObjectInputStream\b|\bMarshal\.load\b|"
            r"\bYAML\.load\s*\(|\bunserialize\s*\(|\bnode-serialize\b"
        ),
        "Deserializing data that can execute code",
        "pickle, marshal, unsafe YAML and native object streams run code chosen by whoever wrote the data. "
        "Use a data-only format (JSON, yaml.safe_load) for anything not produced by this process.",
        unless=re.compile(r"SafeLoader|safe_load|CSafeLoader|BaseLoader"),
        python_ast=True,
        cwe="CWE-502",
    ),
    LineRule(
        "patterns:code-eval",
        "code-exec",
        "high",
        # `exec(` is left to the syntax tree: in JavaScript it is usually child_process's.
        re.compile(r"(?<![\w.])eval\s*\(\s*[^\s)'\"]|\bnew\s+Function\s*\(|setTimeout\s*\(\s*[\"'`]"),
        "Dynamic code evaluation of a non-literal value",
        "eval/exec run whatever the value contains; if any part of it comes from outside, it is code "
        "execution. Parse the data instead (ast.literal_eval, json).",
        python_ast=True,
        cwe="CWE-94",
    ),
    LineRule(
        "patterns:cors-any-origin",
        "cors",
        "medium",
        re.compile(
            r"(?i)access-control-allow-origin['\"]?\s*[:,=]\s*['\"]\*|allow_origins\s*=\s*\[\s*['\"]\*|"
            r"cors_(?:origin_)?allow_all(?:_origins)?\s*=\s*true|\borigin\s*:\s*['\"]\*['\"]"
        ),
        "CORS allows every origin",
        "Any web site can now call this API from a visitor's browser. List the origins that need access.",
        cwe="CWE-942",
    ),
    LineRule(
        "patterns:jwt-unverified",
        "jwt",
        "high",
        re.compile(
            r"verify_signature['\"]?\s*:\s*False|algorithms\s*=\s*\[\s*['\"]none['\"]|jwt\.decode\(.*verify\s*=\s*False"
        ),
        "JWT accepted without verifying its signature",
        "Anyone can forge a token with any claims. Verify the signature with an explicit algorithm list.",
        cwe="CWE-347",
    ),
    LineRule(
        "patterns:csrf-exempt",
        "csrf",
        "medium",
        re.compile(r"@csrf_exempt\b|WTF_CSRF_ENABLED\s*=\s*False|csrf\s*\(\s*\)\s*\.\s*disable\s*\("),
        "CSRF protection switched off",
        "A page on another site can submit this request with the visitor's cookies. Keep CSRF checks on "
        "for cookie-authenticated endpoints.",
        cwe="CWE-352",
    ),
    LineRule(
        "patterns:raw-html",
        "xss",
        "medium",
        re.compile(
            r"dangerouslySetInnerHTML|\.innerHTML\s*=\s*[^'\"\s;]|\bmark_safe\s*\(\s*[^'\")\s]|\|\s*safe\b(?!\s*\|)"
        ),
        "Unescaped HTML from a value",
        "If the value carries user text, it is cross-site scripting. Escape it or sanitize with an allow-list.",
        unless=re.compile(r"""^\s*(?:[rfbu]?["'])?\|"""),  # a Markdown table row ("| safe |"), not a `|safe` filter
        cwe="CWE-79",
    ),
)


# A filter chain that escapes or serialises what `|safe` then marks (Jinja's `|e`/`|escape`/`|tojson`,
# Django's `|force_escape`/`|escape`/`|escapejs`), with an argument (`|tojson(indent=2)`, `|x:"y"`).
_ESCAPED_BEFORE_SAFE = re.compile(
    r"""\|\s*(?:force_escape|escape|e|tojson|escapejs|json_script|urlencode)\b"""
    r"""(?:\s*\([^()]*\)|\s*:\s*(?:"[^"]*"|'[^']*'|[\w.]+))?\s*$"""
)
_SAFE_FILTER = re.compile(r"\|\s*safe\b(?!\s*\|)")
_MARK_SAFE = re.compile(r"\b(?:mark_safe|Markup)\s*\(\s*(?P<arg>[^'\")\s][^,)]*)")
_ESCAPING_CALL = re.compile(
    r"^(?:[\w.]+\.)?(?:escape|conditional_escape|format_html|format_html_join|json_script|escapejs|"
    r"html\.escape|markupsafe\.escape)\s*\("
)


def _raw_html(text: str) -> bool:
    """Whether a line emits a value as raw HTML: some `|safe` not fed by an escaping filter, some
    `mark_safe(...)` of no escaping call, or a DOM `innerHTML`/`dangerouslySetInnerHTML`."""
    if re.search(r"dangerouslySetInnerHTML|\.innerHTML\s*=\s*[^'\"\s;]", text):
        return True
    if any(not _ESCAPED_BEFORE_SAFE.search(text[: m.start()]) for m in _SAFE_FILTER.finditer(text)):
        return True
    return any(not _ESCAPING_CALL.match(m.group("arg")) for m in _MARK_SAFE.finditer(text) if "mark_safe" in m.group(0))


MAX_CONTINUATION_LINES = 6  # lines a call's arguments may run on after its first


def _statement(file: ChangedFile, line: int, text: str) -> str:
    """The line with the lines that continue its open brackets (`yaml.load(stream,` then
    `Loader=yaml.SafeLoader)` on the next line): what an exception (`unless`) is read against."""
    depth = text.count("(") + text.count("[") + text.count("{") - text.count(")") - text.count("]") - text.count("}")
    out = [text]
    for n in range(line + 1, line + 1 + MAX_CONTINUATION_LINES):
        if depth <= 0:
            break
        more = file.line_text(n)
        out.append(more)
        depth += more.count("(") + more.count("[") + more.count("{")
        depth -= more.count(")") + more.count("]") + more.count("}")
    return "\n".join(out)


def _matches(rule: LineRule, text: str, statement: str | None = None) -> bool:
    whole = statement if statement is not None else text
    if not rule.pattern.search(text) or (rule.unless is not None and rule.unless.search(whole)):
        return False
    if rule.rule == "patterns:raw-html":
        return _raw_html(text)
    if rule.kind == "sql":
        return INTERPOLATION.search(text) is not None
    if rule.kind == "shell":
        # A constant command is bandit's (low) concern; a command built from a value is ours.
        return INTERPOLATION.search(text) is not None or _VARIABLE_COMMAND.search(text) is not None
    return True


# A connection that names only this machine: verification off there exposes nothing on a network.
_LOOPBACK = re.compile(r"""(?<![\w.-])(?:localhost|127\.0\.0\.1|\[?::1\]?)(?![\w.-])""")


def line_rule_issues(
    file: ChangedFile, *, python_ast_done: bool, covered_kinds: frozenset[str] = frozenset()
) -> list[Issue]:
    """Issues from the line rules on this change's added lines. `python_ast_done` skips the rules
    the syntax-tree checks already covered; `covered_kinds` the families another language's
    data-flow rules judged on this file (a line cannot see where a value comes from)."""
    language = language_of(file.path)
    if language in DOC_LANGUAGES:
        return []  # prose and examples for a reader, not code that runs
    issues: list[Issue] = []
    moved = {" ".join(t.split()) for t in file.removed_lines}  # a re-indented or moved line's old text
    for line, text in sorted(file.changed_lines.items()):
        if _COMMENT.match(text) or len(text) > MAX_RULE_LINE_CHARS:
            continue
        for rule in LINE_RULES:
            if (python_ast_done and rule.python_ast) or rule.kind in covered_kinds:
                continue
            if rule.languages is not None and language not in rule.languages:
                continue
            if rule.rule == "patterns:raw-html" and " ".join(text.split()) in moved:
                continue  # the same template line re-indented or moved: what it emits did not change
            if _matches(rule, text, _statement(file, line, text) if rule.unless is not None else None):
                if rule.kind == "tls-verify" and _LOOPBACK.search(text):
                    break  # a check of this host's own server (a health check): no network path to attack
                issues.append(
                    Issue(line, rule.rule, rule.severity, rule.title, rule.body, kind=rule.kind, cwe=rule.cwe)
                )
                break
    return issues
