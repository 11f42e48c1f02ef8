"""What a change does that deserves a reviewer's attention first, read from its diff lines.

The rule-based strategy ranks files by these signals: a file whose change touches SQL, a shell, the
network, cryptography or authentication, deserialises data, deletes tests or changes a public
signature comes before one that does none of that. Signals come from the code the change wrote or
removed, never from words in a file's name (`client.py` says nothing; `requests.get(url)` does).
"""

from __future__ import annotations

import re

from reviewers.kernel.contracts import FileChange
from reviewers.paths import is_test_path

# (signal, pattern over one added or removed line); the first pattern a line matches names it.
SIGNALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "sql",
        re.compile(
            r"(?i)\.(?:execute|executemany|executescript|raw|exec_driver_sql)\s*\(|\bcursor\s*\(|"
            r"\b(?:select\s.+\sfrom|insert\s+into|update\s+\w+\s+set|delete\s+from)\b"
        ),
    ),
    (
        "shell",
        re.compile(
            r"\bsubprocess\.\w+|\bos\.(?:system|popen|exec\w*|spawn\w*)\s*\(|\bchild_process\b|\bexec\.Command\(|"
            r"\bRuntime\.getRuntime\(\)\.exec|\bshell_exec\s*\(|\bshell\s*=\s*True"
        ),
    ),
    (
        "deserialisation",
        re.compile(r"\b(?:pickle|marshal|dill|shelve|jsonpickle)\.\w+|\byaml\.(?:unsafe_)?load\b|\bunserialize\s*\("),
    ),
    (
        "crypto",
        re.compile(
            r"\b(?:hashlib|hmac|bcrypt|argon2|scrypt|secrets|jwt|Crypto|cryptography|nacl)\.\w+|"
            r"\bcrypto\.(?:createHash|createHmac|createCipheriv|randomBytes)|\bcompare_digest\b"
        ),
    ),
    (
        "auth",
        re.compile(
            r"(?i)\b(?:authenticate|login_required|check_password|verify_password|set_password|set_cookie|"
            r"permission_required|has_perm\w*|requires_auth|csrf\w*|session\[|Authorization)\b"
        ),
    ),
    (
        "network",
        re.compile(
            r"\b(?:requests|httpx|aiohttp|urllib3?|http\.client|socket)\.\w+|\bfetch\s*\(|\baxios\.\w+|"
            r"\bhttp\.(?:Get|Post|NewRequest)\b|\bredirect\s*\("
        ),
    ),
    (
        "filesystem",
        re.compile(r"\bopen\s*\(|\bPath\s*\(|\bos\.(?:remove|unlink|rename)\s*\(|\bshutil\.\w+|\bsend_file\b"),
    ),
)


def _any_of(patterns: tuple[re.Pattern[str], ...]) -> re.Pattern[str]:
    """One pattern that matches where any of `patterns` does (each keeps its own case rule)."""
    parts = [f"(?i:{p.pattern[4:]})" if p.pattern.startswith("(?i)") else f"(?:{p.pattern})" for p in patterns]
    return re.compile("|".join(parts))


# Most lines show no signal: one search says so, instead of one per signal (a 10,000-line change
# was searched 70,000 times per pass, and the strategy reads its lines twice).
ANY_SIGNAL = _any_of(tuple(pattern for _, pattern in SIGNALS))
_TEST_DEFINITION = re.compile(r"^\s*(?:(?:async\s+)?def\s+test\w*|func\s+Test\w+|(?:it|test)\s*\()")
_PUBLIC_DEFINITION = re.compile(
    r"^(?:\s*(?:export\s+)?(?:async\s+)?(?:def|function|func|fn|pub\s+fn)\s+(?P<name>[A-Za-z]\w*)\s*\()"
)


def change_signals(change: FileChange) -> list[str]:
    """The risk signals of one file's change, in a stable order, each once."""
    found: dict[str, None] = {}
    added_defs: set[str] = set()
    removed_defs: set[str] = set()
    for hunk in change.hunks:
        for line in hunk.lines:
            if line.kind == "context":
                continue
            if ANY_SIGNAL.search(line.text):
                for signal, pattern in SIGNALS:
                    if pattern.search(line.text):
                        found.setdefault(signal, None)
                        break
            if (match := _PUBLIC_DEFINITION.match(line.text)) is not None:
                (added_defs if line.kind == "add" else removed_defs).add(match.group("name"))
            if line.kind == "del" and is_test_path(change.path) and _TEST_DEFINITION.match(line.text):
                found.setdefault("deletes tests", None)
    if change.status == "deleted" and is_test_path(change.path):
        found.setdefault("deletes tests", None)
    if added_defs & removed_defs:
        found.setdefault("changes a public signature", None)
    return list(found)
