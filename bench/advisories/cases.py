"""The cases of bench.advisories and the pure logic around them (no git, no tools).

A case is one published security fix reverted as a merge request: the *revert* has base = the fix
commit's content and head = the content before the fix (the vulnerable code put back). Only the
changed Python files are stored, with a few unchanged neighbours as context. The vulnerable location
is recorded when the case is built, before any tool runs: the lines of the revert's head that the fix
removed or changed (the old side of the fix's hunks), and for a hunk that only added lines (a guard
put in front of a sink) the two head lines around the place it was added. Lines of test files never
count as the vulnerable location.

Also here, all mechanical and decided from the fix's diff and the advisory's words alone:
- the shape (`adds-dangerous-call`: the fix took a dangerous call or option away, so the revert puts
  it back; `removes-guard`: the fix added a check, escape, safe helper or hardening option, so the
  revert takes it away; `other`);
- the class (a CWE family from the advisory's text);
- the part (development or held-out), by a hash of the project's name, so a project's cases are
  never split between parts;
- whether a tool's finding is at the vulnerable location (within ±2 lines of a vulnerable line, or on
  the same statement).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

CASES_FILE = Path(__file__).with_name("cases.jsonl.gz")
HELD_OUT_SHARE = 40  # percent of projects, by hash
NEAR_LINES = 2  # a finding this many lines from a vulnerable line counts as at it

Part = Literal["dev", "heldout"]
Shape = Literal["adds-dangerous-call", "removes-guard", "other"]


@dataclass
class ChangedPy:
    """One Python file the fix changed: its text at the fix (the revert's base) and before it (the
    revert's head). None where the file does not exist on that side."""

    path: str
    fixed: str | None
    vulnerable: str | None


@dataclass
class Case:
    id: str  # the advisory's id (PYSEC-..., GHSA-...)
    aliases: list[str]
    summary: str
    package: str
    repo: str  # OWNER/NAME as the advisory's reference names it
    project: str  # the repository's name, lower case: the unit of the split
    fix_commit: str
    parent_commit: str
    commit_url: str
    license: str  # SPDX-like id read from the repository's licence file at the fix, or "unknown"
    license_file: str
    family: str  # CWE family from the advisory's text (`classify`)
    cwe: str
    shape: Shape
    files: list[ChangedPy]
    context: list[tuple[str, str]] = field(default_factory=list)  # unchanged neighbours (path, text)
    vulnerable: dict[str, list[int]] = field(default_factory=dict)  # head path → head lines

    @property
    def part(self) -> Part:
        return part_of(self.project)


def part_of(project: str) -> Part:
    """A deterministic split by project: sha256 of the lower-cased name, modulo 100."""
    digest = hashlib.sha256(project.lower().encode("utf-8")).hexdigest()
    return "heldout" if int(digest[:8], 16) % 100 < HELD_OUT_SHARE else "dev"


# --- storing -----------------------------------------------------------------------------------------


def case_to_json(case: Case) -> str:
    record = asdict(case)
    record["context"] = [list(pair) for pair in case.context]
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


def case_from_json(text: str) -> Case:
    raw = json.loads(text)
    raw["files"] = [ChangedPy(**f) for f in raw["files"]]
    raw["context"] = [(p, t) for p, t in raw.get("context", [])]
    return Case(**raw)


def write_cases(cases: Iterable[Case], path: Path = CASES_FILE) -> None:
    # mtime=0: the same cases give the same bytes
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as out:
        for case in cases:
            out.write((case_to_json(case) + "\n").encode("utf-8"))


def read_cases(path: Path = CASES_FILE) -> list[Case]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [case_from_json(line) for line in handle if line.strip()]


# --- the fix's diff ----------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    removed: tuple[str, ...]  # old-side lines (the fix took them away)
    added: tuple[str, ...]  # new-side lines (the fix put them in)


def parse_hunks(diff_text: str) -> list[Hunk]:
    """The hunks of a zero-context unified diff of one file (`git diff -U0`)."""
    hunks: list[Hunk] = []
    current: tuple[int, int, int, int] | None = None
    removed: list[str] = []
    added: list[str] = []

    def close() -> None:
        if current is not None:
            hunks.append(Hunk(*current, tuple(removed), tuple(added)))

    for line in diff_text.splitlines():
        m = _HUNK.match(line)
        if m:
            close()
            old_count = 1 if m.group(2) is None else int(m.group(2))
            new_count = 1 if m.group(4) is None else int(m.group(4))
            current = (int(m.group(1)), old_count, int(m.group(3)), new_count)
            removed, added = [], []
        elif current is not None and line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:])
        elif current is not None and line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    close()
    return hunks


def _is_code(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def vulnerable_lines(hunks: Sequence[Hunk], head_line_count: int) -> list[int]:
    """The revert's head lines (= the fix's old side) the fix touched. A hunk that only added lines
    marks the two old-side lines around the place it added them; blank and comment-only lines are
    not a location, nor is a hunk that only added blank lines or comments."""
    lines: set[int] = set()
    for h in hunks:
        if h.old_count > 0:
            for offset, text in enumerate(h.removed):
                if _is_code(text):
                    lines.add(h.old_start + offset)
        elif any(_is_code(t) for t in h.added):
            # `-a,0`: the lines were added after old line a
            for n in (h.old_start, h.old_start + 1):
                if 1 <= n <= max(head_line_count, 1):
                    lines.add(n)
    return sorted(lines)


_TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$")


def is_test_path(path: str) -> bool:
    return bool(_TEST_PATH.search(path))


# --- shape -------------------------------------------------------------------------------------------

# Calls and options that are dangerous to put back: a code or command execution, a deserializer, a
# template or markup bypass, a parser resolving entities, a TLS check turned off.
DANGEROUS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in {
        "eval": r"\beval\s*\(",
        "exec": r"\bexec\s*\(",
        "compile": r"(?<![.\w])compile\s*\(",
        "import": r"__import__\s*\(|import_module\s*\(",
        "pickle": r"\b(c?pickle|dill|jsonpickle|marshal|shelve|joblib)\.(loads?|decode|Unpickler|open)\b",
        "torch-load": r"\btorch\.load\s*\(",
        "yaml-load": r"\byaml\.(load|load_all|unsafe_load|full_load)\s*\(|Loader\s*=\s*(yaml\.)?(Unsafe|Full)?Loader\b",
        "allow-pickle": r"allow_pickle\s*=\s*True",
        "shell": r"shell\s*=\s*True|\bos\.(system|popen|exec\w*|spawn\w*)\s*\(|\bcommands\.getoutput",
        "subprocess": r"\bsubprocess\.(call|run|Popen|check_output|check_call|getoutput|getstatusoutput)\s*\(",
        "markup": r"\bmark_safe\s*\(|\bMarkup\s*\(|\|\s*safe\b|autoescape\s*=\s*False|render_template_string\s*\(",
        "sql": r"\.(execute|executemany|raw|extra)\s*\(\s*(f[\"']|[\"'][^\"']*[\"']\s*(%|\.format|\+))",
        "xml": r"resolve_entities\s*=\s*True|no_network\s*=\s*False|\bxml\.(dom\.minidom|sax|etree)\b"
        r"|\bXMLParser\s*\(|\betree\.(parse|fromstring|XML)\s*\(",
        "tls-off": r"verify\s*=\s*False|CERT_NONE|check_hostname\s*=\s*False|_create_unverified_context",
        "weak-hash": r"\b(md5|sha1)\s*\(|\brandom\.(random|randint|choice)\s*\(",
        "extract": r"\.extractall\s*\(|\.extract\s*\(",
        "getattr": r"\b(getattr|setattr)\s*\(",
        "format": r"\.format\s*\(\s*\*\*|\.format_map\s*\(",
    }.items()
}

# What a fix adds to stop an attack: a check, an escape, a safe helper, a limit, a hardening option.
_GUARD_STATEMENT = re.compile(r"^\s*(if|elif|assert|raise|except|return\s+(False|None)\b)")
_GUARD_WORDS = re.compile(
    r"escape|quote|saniti[sz]|clean|safe_|secure_filename|basename|realpath|abspath|normpath|commonpath"
    r"|is_relative_to|relative_to|compare_digest|constant_time|validat|verify|check|allow|permission|"
    r"authori[sz]|authenticat|login_required|csrf|forbidden|abort\s*\(|deny|denied|Unauthorized|"
    r"PermissionDenied|startswith|endswith|fullmatch|max_|limit|urlparse|urlsplit|netloc|scheme|"
    r"SafeLoader|safe_load|shell\s*=\s*False|verify\s*=\s*True|allow_pickle\s*=\s*False|"
    r"resolve_entities\s*=\s*False|autoescape|defusedxml|isinstance|in\s+ALLOWED|whitelist|blacklist",
    re.IGNORECASE,
)


def dangerous_in(lines: Iterable[str]) -> set[str]:
    code = [line for line in lines if _is_code(line)]
    return {name for name, pattern in DANGEROUS.items() if any(pattern.search(line) for line in code)}


def is_guard_line(line: str) -> bool:
    return _is_code(line) and bool(_GUARD_STATEMENT.match(line) or _GUARD_WORDS.search(line))


def classify_shape(hunks_by_file: Mapping[str, Sequence[Hunk]]) -> Shape:
    """From the fix's diff of its non-test files: the revert adds a dangerous call back when the fix
    removed one (a dangerous call or option on the lines it took away, absent from the lines it put
    in); it removes a guard when the fix put in a check, escape, safe helper or hardening option;
    otherwise `other`."""
    removed: list[str] = []
    added: list[str] = []
    for path, hunks in hunks_by_file.items():
        if is_test_path(path):
            continue
        for h in hunks:
            removed.extend(h.removed)
            added.extend(h.added)
    if dangerous_in(removed) - dangerous_in(added):
        return "adds-dangerous-call"
    if any(is_guard_line(line) for line in added):
        return "removes-guard"
    return "other"


# --- class -------------------------------------------------------------------------------------------

# (family, CWE, pattern over the advisory's lower-cased text), first match wins: specific first.
FAMILIES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (family, cwe, re.compile(pattern))
    for family, cwe, pattern in (
        ("xxe", "CWE-611", r"\bxxe\b|xml external entit|external entit|entity expansion|billion laughs"),
        ("redos", "CWE-1333", r"redos|regular expression denial|catastrophic backtracking|regular expression"),
        ("deserialization", "CWE-502", r"deserializ|unpickl|\bpickle|yaml\.load|unsafe load|marshal"),
        ("sql-injection", "CWE-89", r"sql injection|sqli\b"),
        (
            "command-injection",
            "CWE-78",
            r"command injection|shell injection|os command|shell command|"
            r"arbitrary (shell )?commands?",
        ),
        (
            "path-traversal",
            "CWE-22",
            r"path traversal|directory traversal|zip slip|\.\./|"
            r"arbitrary file (read|write|access|overwrite|deletion)|outside of the",
        ),
        ("ssrf", "CWE-918", r"\bssrf\b|server[- ]side request forgery"),
        ("open-redirect", "CWE-601", r"open redirect|url redirect|redirection to untrusted|redirect"),
        ("xss", "CWE-79", r"cross[- ]site scripting|\bxss\b|html injection|script injection"),
        ("csrf", "CWE-352", r"\bcsrf\b|cross[- ]site request forgery"),
        ("code-injection", "CWE-94", r"code injection|code execution|eval\b|sandbox|template injection|\bssti\b"),
        (
            "crypto",
            "CWE-327",
            r"timing attack|timing side|constant[- ]time|weak (hash|crypt|random)|"
            r"cryptograph|signature|certificate|\btls\b|\bssl\b|hostname verification|nonce|predictable",
        ),
        (
            "auth",
            "CWE-284",
            r"authenticat|authoriz|access control|permission|privilege|bypass|"
            r"unauthori[sz]ed|session fixation|brute[- ]?force",
        ),
        ("header-injection", "CWE-113", r"crlf|header injection|response splitting|request smuggling"),
        ("info-leak", "CWE-200", r"information disclosure|sensitive information|leak|expos|disclos"),
        (
            "dos",
            "CWE-400",
            r"denial of service|\bdos\b|infinite loop|memory exhaustion|resource consumption|"
            r"uncontrolled|exhaust",
        ),
        ("injection", "CWE-74", r"injection"),
    )
)


def classify(text: str) -> tuple[str, str]:
    """The CWE family of an advisory from its text: (family, CWE)."""
    lowered = text.lower()
    for family, cwe, pattern in FAMILIES:
        if pattern.search(lowered):
            return family, cwe
    return "other", "CWE-20"


# --- matching ----------------------------------------------------------------------------------------


def statement_spans(text: str) -> list[tuple[int, int]]:
    """The (first, last) line of every simple statement of a file, and of every compound statement's
    header (`if ...:` up to its body); [] when the file cannot be parsed."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        end = node.end_lineno or node.lineno
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            end = max(node.lineno, body[0].lineno - 1)
        spans.append((node.lineno, end))
    return spans


def at_location(
    line: int, end_line: int, vulnerable: Sequence[int], spans: Sequence[tuple[int, int]], near: int = NEAR_LINES
) -> bool:
    """Whether a finding on lines line..end_line is at the vulnerable location: within `near` lines of
    a vulnerable line, or on a statement that holds one."""
    end_line = max(end_line, line)
    for v in vulnerable:
        if line - near <= v <= end_line + near:
            return True
    for first, last in spans:
        if first <= end_line and line <= last and any(first <= v <= last for v in vulnerable):
            return True
    return False


def changed_head_lines(hunks: Sequence[Hunk]) -> set[int]:
    """The lines the revert's head has added or changed relative to its base (the fix's old-side
    lines of each hunk, the revert's `+` lines), and where the revert only deleted lines, the two
    head lines around the deletion."""
    changed: set[int] = set()
    for h in hunks:
        if h.old_count:
            changed.update(range(h.old_start, h.old_start + h.old_count))
        else:
            changed.update(n for n in (h.old_start, h.old_start + 1) if n >= 1)
    return changed


def on_changed(line: int, end_line: int, changed: set[int]) -> bool:
    return any(n in changed for n in range(line, max(end_line, line) + 1))


def iter_parts(cases: Sequence[Case], part: str) -> Iterator[Case]:
    for case in cases:
        if part == "all" or case.part == part:
            yield case
