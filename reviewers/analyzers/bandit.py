"""bandit's checks, as ruff implements them (its flake8-bandit rules, `S602` for bandit's `B602`).

ruff reads the file's text and never imports it, reads every Python version's syntax, and lints a
whole review's files in one process in a few hundredths of a second: bandit took a second of CPU
and a half-second start-up for the same checks on a 10,000-line change. Findings keep bandit's
names (`bandit:B602`, so a finding's fingerprint, and the thread it is posted as, stays the one it
had when bandit itself ran), bandit's severity and confidence for each check (`CHECKS`, with the
cases where bandit grades one check two ways told apart from ruff's message or the call), its CWE,
and the line bandit reported (a shell call's `shell=` line, `verify=`'s, ...). Only issues on lines
the change added are kept (any line of the call).

Checks that only say "this module was imported" or "an assert exists" are not asked for: they are
noise in a review. Nor are checks our syntax-tree rules judge with data flow (SQL text, urlopen, XML
parsers). Severity policy: bandit's own severity, one step down when its confidence is low; the
finding's confidence is bandit's. B104 (binding to all interfaces) is not reported where the
wildcard address is only compared with (`host not in {"0.0.0.0", "[::]"}`). bandit's `# nosec`
(bare, or naming the check by id or name) on a line of the call is honoured, and so is ruff's
`# noqa: S202` for that check only; a bare `# noqa` is not (it is usually about another rule).

What ruff lacks, and so is no longer asked: B613 (bidirectional control characters; ruff's PLE2502,
in the code-quality reviewer's rules, reports them), B614 (`torch.load` without `weights_only`; the
taint analysis treats it as a deserialization sink) and B703 (django's `mark_safe` on a value; B308
reports the same call, and the taint analysis its XSS).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from reviewers.analyzers import ruff
from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.kernel.contracts import Confidence, Severity


@dataclass(frozen=True)
class Check:
    """One bandit check kept, as bandit grades it."""

    name: str  # bandit's test name; a `# nosec` comment may name the check by it
    severity: Severity
    confidence: Confidence
    cwe: int
    at_argument: str | None = None  # bandit reports the line of this keyword argument's value, when given


# bandit's checks the review keeps, with bandit's own grading (bandit 1.9's plugins and blacklists).
# Not kept: B101 (asserts are how tests and invariants are written); B105-B107 (hard-coded
# passwords: the secrets scanner judges values, not names); B110/B112 (try/except/pass, reported by
# the code-quality reviewer as ruff's S110/S112); B311 (random is almost always simulation or
# jitter; the taint analysis reports weak randomness used for a secret); the import-only B401-B415;
# B603/B606/B607 (a process without a shell is the safe form; a partial path is environment
# hygiene); B615 (a hub download may be a local path); B608, B310, B313-B320 (SQL text, urlopen and
# XML parsers, which our syntax-tree checks judge by where the value comes from).
CHECKS: dict[str, Check] = {
    "B102": Check("exec_used", "medium", "high", 78),
    "B103": Check("set_bad_file_permissions", "medium", "high", 732),  # high when world-writable
    "B104": Check("hardcoded_bind_all_interfaces", "medium", "medium", 605),
    "B108": Check("hardcoded_tmp_directory", "medium", "medium", 377),
    "B113": Check("request_without_timeout", "medium", "low", 400),
    "B201": Check("flask_debug_true", "high", "medium", 94, "debug"),
    "B202": Check("tarfile_unsafe_members", "high", "high", 22),  # lower when `members=` is given
    "B301": Check("pickle", "medium", "high", 502),
    "B302": Check("marshal", "medium", "high", 502),
    "B303": Check("md5", "medium", "high", 327),
    "B304": Check("ciphers", "high", "high", 327),
    "B305": Check("cipher_modes", "medium", "high", 327),
    "B306": Check("mktemp_q", "medium", "high", 377),
    "B307": Check("eval", "medium", "high", 78),
    "B308": Check("mark_safe", "medium", "high", 79),
    "B312": Check("telnetlib", "high", "high", 319),
    "B321": Check("ftplib", "high", "high", 319),
    "B323": Check("unverified_context", "medium", "high", 295),
    "B324": Check("hashlib_insecure_functions", "high", "high", 327),  # crypt's methods: medium
    "B501": Check("request_with_no_cert_validation", "high", "high", 295, "verify"),
    "B502": Check("ssl_with_bad_version", "medium", "medium", 327, "ssl_version"),  # high in wrap_socket, Context
    "B503": Check("ssl_with_bad_defaults", "medium", "medium", 327),
    "B504": Check("ssl_with_no_version", "low", "medium", 327),
    "B505": Check("weak_cryptographic_key", "medium", "high", 326),  # high below 1,024 bits
    "B506": Check("yaml_load", "medium", "high", 20),
    "B507": Check("ssh_no_host_key_verification", "high", "medium", 295),
    "B508": Check("snmp_insecure_version", "medium", "high", 319),
    "B509": Check("snmp_weak_cryptography", "medium", "high", 319),
    "B601": Check("paramiko_calls", "medium", "medium", 78),
    "B602": Check("subprocess_popen_with_shell_equals_true", "high", "high", 78, "shell"),  # low: a literal
    "B604": Check("any_other_function_with_shell_equals_true", "medium", "low", 78, "shell"),
    "B605": Check("start_process_with_a_shell", "high", "high", 78),  # low: a literal command
    "B609": Check("linux_commands_wildcard_injection", "high", "medium", 155, "shell"),
    "B610": Check("django_extra_used", "medium", "medium", 89),
    "B611": Check("django_rawsql_used", "medium", "medium", 89),
    "B612": Check("logging_config_insecure_listen", "medium", "high", 94),
    "B701": Check("jinja2_autoescape_false", "high", "high", 94),
    "B702": Check("use_of_mako_templates", "medium", "high", 80),
    "B704": Check("markupsafe_markup_xss", "medium", "high", 79),
}  # fmt: skip
# ruff's rule for each kept check: the same number with ruff's prefix
RUFF_CODE = {test_id: "S" + test_id[1:] for test_id in CHECKS}
BANDIT_ID = {code: test_id for test_id, code in RUFF_CODE.items()}
BANDIT_RULES = ruff.RuleSet(select=tuple(sorted(RUFF_CODE.values())), honour_noqa=False)
# The names of bandit's other checks, so that a `# nosec` naming one of them is not read as a bare one.
OTHER_TEST_NAMES = {
    "assert_used": "B101", "hardcoded_password_string": "B105", "hardcoded_password_funcarg": "B106",
    "hardcoded_password_default": "B107", "try_except_pass": "B110", "try_except_continue": "B112",
    "urllib_urlopen": "B310", "random": "B311", "trojansource": "B613", "pytorch_load": "B614",
    "huggingface_unsafe_download": "B615", "subprocess_without_shell_equals_true": "B603",
    "start_process_with_no_shell": "B606", "start_process_with_partial_path": "B607",
    "hardcoded_sql_expressions": "B608", "django_mark_safe": "B703",
}  # fmt: skip
TEST_ID_BY_NAME = {**OTHER_TEST_NAMES, **{check.name: test_id for test_id, check in CHECKS.items()}}
# Checks bandit makes on a string (B104, B108) or a definition's default (B503), not on a call: the
# finding spans the diagnostic itself rather than the call around it.
NOT_ON_A_CALL = frozenset({"B104", "B108", "B503"})
# bandit test id → the family our own pattern checks use, so both reports of one problem merge.
KIND_BY_TEST: dict[str, str] = {
    "B501": "tls-verify", "B502": "tls-verify", "B503": "tls-verify", "B504": "tls-verify",
    "B323": "tls-verify",
    "B601": "shell", "B602": "shell", "B604": "shell", "B605": "shell", "B609": "shell",
    "B301": "deserialization", "B302": "deserialization", "B506": "deserialization",
    "B102": "code-exec", "B307": "code-exec",
}  # fmt: skip
_ONE_DOWN: dict[Severity, Severity] = {
    "critical": "high",
    "high": "medium",
    "medium": "low",
    "low": "low",
    "info": "info",
}
_WORLD_WRITABLE = 0o002
_MASK = re.compile(r"`0o(?P<mask>[0-7]+)`")
_BREAKABLE_BELOW_BITS = 1024  # bandit's "high" threshold for RSA and DSA keys (its "medium" one, 2,048, is ruff's)


def prefetch(files: Sequence[tuple[str, str]], *, background: bool = False) -> None:
    """ruff's run of bandit's checks over many (path, text) files in one process, kept per file."""
    ruff.prefetch(files, rules=BANDIT_RULES, background=background)


_WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", "[::]"})  # noqa: S104 - what B104 looks for, not a bind


def wildcard_only_compared(tree: ast.Module | None, line: int) -> bool:
    """Whether every wildcard address written on `line` is an operand of a comparison (B104 reads
    the string wherever it is)."""
    if tree is None:
        return False
    written: set[int] = set()
    compared: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in _WILDCARD_ADDRESSES and node.lineno == line:
            written.add(id(node))
        elif isinstance(node, ast.Compare):
            compared.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Constant))
    return bool(written) and written <= compared


# ruff's suppression comment with its codes (noqa, a colon, codes split by commas or spaces; any case)
_NOQA_CODES = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)


def suppressed_as_ruff_code(file: ChangedFile, test_id: str, span: Sequence[int]) -> bool:
    """Whether a line of the finding's statement carries the project's own ruff suppression of the
    same check (noqa S202 for bandit's B202): the maintainers decided it, with the other tool.
    A bare noqa names no check and is not taken as a decision about this one."""
    if not (test_id.startswith("B") and test_id[1:].isdigit()):
        return False
    ruff_code = "S" + test_id[1:]
    for number in range(min(span), max(span) + 1):
        for match in _NOQA_CODES.finditer(file.line_text(number)):
            if ruff_code in re.split(r"[\s,]+", match.group("codes").upper()):
                return True
    return False


def _graded(test_id: str, message: str, call: ast.Call | None) -> tuple[Severity, Confidence]:
    """bandit's severity and confidence for this finding of the check: where bandit grades one check
    two ways, ruff's message or the call tells which."""
    check = CHECKS[test_id]
    severity, confidence = check.severity, check.confidence
    if test_id in ("B602", "B605") and "seems safe" in message:
        severity = "low"  # a literal command: bandit's "seems safe, but may be changed in the future"
    elif test_id == "B103" and (mask := _MASK.search(message)) and int(mask.group("mask"), 8) & _WORLD_WRITABLE:
        severity = "high"
    elif test_id == "B324" and "`crypt`" in message:
        severity = "medium"
    elif test_id == "B502" and call is not None and _called_name(call) in ("wrap_socket", "Context"):
        severity, confidence = "high", "high"
    elif test_id == "B505" and call is not None and message.startswith(("RSA", "DSA")):
        size = _keyword(call, "key_size") or (call.args[1 if message.startswith("RSA") else 0] if call.args else None)
        if isinstance(size, ast.Constant) and isinstance(size.value, int) and size.value < _BREAKABLE_BELOW_BITS:
            severity = "high"
    elif test_id == "B202" and call is not None and (members := _keyword(call, "members")) is not None:
        # bandit: members from a function call is a filter it cannot judge (low); anything else, medium
        severity = confidence = "low" if isinstance(members, ast.Call) else "medium"
    elif test_id == "B701" and call is not None and (escape := _keyword(call, "autoescape")) is not None:
        if not isinstance(escape, ast.Constant):
            confidence = "medium"  # a value bandit cannot read
    return severity, confidence


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _column(file: ChangedFile, row: int, column: int) -> int:
    """ruff's 1-based character column as the syntax tree's 0-based UTF-8 byte offset."""
    return len(file.line_text(row)[: max(column - 1, 0)].encode("utf-8", errors="surrogateescape"))


def _call_around(tree: ast.Module | None, start: tuple[int, int], end: tuple[int, int]) -> ast.Call | None:
    """The innermost call whose text holds the diagnostic's (line, byte column) range."""
    if tree is None:
        return None
    found: ast.Call | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.end_lineno is None or node.end_col_offset is None:
            continue
        if (node.lineno, node.col_offset) <= start and end <= (node.end_lineno, node.end_col_offset):
            if found is None or (node.lineno, node.col_offset) >= (found.lineno, found.col_offset):
                found = node
    return found


_NOSEC = re.compile(r"#\s*nosec:?\s*(?P<tests>[^#]+)?")


def _nosec_tests(line: str) -> set[str] | None:
    """The checks a `# nosec` comment on the line names (an empty set: all of them), None without one.
    As bandit reads it: ids or test names; words that name no check are ignored."""
    comment = _NOSEC.search(line)
    if comment is None:
        return None
    words = re.findall(r"[A-Za-z0-9_]+", comment.group("tests") or "")
    return {w.upper() for w in words if re.fullmatch(r"B\d+", w, re.IGNORECASE)} | {
        TEST_ID_BY_NAME[w] for w in words if w in TEST_ID_BY_NAME
    }


def suppressed_by_nosec(file: ChangedFile, test_id: str, line: int, span: Sequence[int]) -> bool:
    """Whether bandit's `# nosec` silences the check here: on the reported line, or the first line of
    the call that carries one (bandit's own reading)."""
    named = _nosec_tests(file.line_text(line))
    in_span = next(
        (found for n in range(min(span), max(span) + 1) if (found := _nosec_tests(file.line_text(n))) is not None),
        None,
    )
    if named is None and in_span is None:
        return False
    tests = (named or set()) | (in_span or set())
    return not tests or test_id in tests


def _call_key(call: ast.Call) -> tuple[str, tuple[str, ...]]:
    return ast.unparse(call.func), tuple(ast.unparse(a) for a in call.args)


def said_at_base(file: ChangedFile) -> frozenset[tuple[str, tuple[str, tuple[str, ...]]]]:
    """(bandit test, call by callee and positional arguments) of what bandit said of the file before
    the change: a call that was there with the same arguments and the same finding is no news of the
    change, which only set its options (`yaml.load(text)` given `Loader=yaml.FullLoader`). An option
    the change made unsafe is a finding at head only, and `guard_removal`'s."""
    if file.change.status not in ("modified", "renamed") or not file.change.hunks:
        return frozenset()
    base_text = reverse_patch(file.text, file.change)
    if base_text is None:
        return frozenset()
    try:
        tree = ast.parse(base_text)
    except (SyntaxError, ValueError):
        return frozenset()
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    out: set[tuple[str, tuple[str, tuple[str, ...]]]] = set()
    for diag in ruff.run_ruff_json(base_text, path=file.change.old_path or file.path, rules=BANDIT_RULES):
        test_id = BANDIT_ID.get(str(diag.get("code") or ""))
        row = int((diag.get("location") or {}).get("row") or 0)
        if test_id is not None:
            out.update((test_id, _call_key(c)) for c in calls if c.lineno <= row <= (c.end_lineno or c.lineno))
    return frozenset(out)


def bandit_issues(file: ChangedFile) -> list[Issue]:
    """bandit's findings on the lines this change added (any line of a multi-line call), less those
    it said of the same call before the change (`said_at_base`)."""
    if file.language != "python":
        return []
    issues: list[Issue] = []
    at_base: list[frozenset[tuple[str, tuple[str, tuple[str, ...]]]]] = []  # read once, when first needed
    for diag in ruff.run_ruff_json(file.text, path=file.path, rules=BANDIT_RULES):
        test_id = BANDIT_ID.get(str(diag.get("code") or ""))
        location, end_location = diag.get("location") or {}, diag.get("end_location") or {}
        row = int(location.get("row") or 0)
        if test_id is None or row < 1:
            continue
        end_row = max(row, int(end_location.get("row") or row))
        start = (row, _column(file, row, int(location.get("column") or 1)))
        end = (end_row, _column(file, end_row, int(end_location.get("column") or 1)))
        call = _call_around(file.python_tree, start, end)
        check = CHECKS[test_id]
        if call is not None and test_id not in NOT_ON_A_CALL:
            span = list(range(call.lineno, (call.end_lineno or call.lineno) + 1))
            argument = _keyword(call, check.at_argument) if check.at_argument else None
            line = argument.lineno if argument is not None else call.lineno
        else:
            span, line = list(range(row, end_row + 1)), row
        if not file.touches(min(span), max(span)):
            continue
        if test_id == "B104" and wildcard_only_compared(file.python_tree, line):
            continue  # `host not in {"0.0.0.0", "[::]"}` asks about an address, it binds nothing
        if suppressed_by_nosec(file, test_id, line, span) or suppressed_as_ruff_code(file, test_id, span):
            continue  # the project's own decision, with bandit's comment or ruff's
        if call is not None and test_id not in NOT_ON_A_CALL:
            at_base = at_base or [said_at_base(file)]
            if (test_id, _call_key(call)) in at_base[0]:
                continue
        if not file.is_changed(line):
            line = min(n for n in file.changed_lines if min(span) <= n <= max(span))
        severity, confidence = _graded(test_id, str(diag.get("message") or ""), call)
        if confidence == "low":
            severity = _ONE_DOWN[severity]
        text = str(diag.get("message") or test_id)
        issues.append(
            Issue(
                line=line,
                rule=f"bandit:{test_id}",
                severity=severity,
                title=text[:200],
                body=f"{text} (bandit {test_id} {check.name}, confidence {confidence})",
                kind=KIND_BY_TEST.get(test_id, f"bandit:{test_id}"),
                confidence=confidence,
                cwe=f"CWE-{check.cwe}",
            )
        )
    return issues
