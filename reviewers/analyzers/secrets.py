"""Hard-coded credentials on added lines, in any language.

Three signals, strongest first: a token with a vendor's documented prefix (`sk_live_`, `AKIA`,
`ghp_`, `glpat-`, a PEM private key block, ...); a credential in a URL (`scheme://user:pass@host`);
and a string literal assigned to a credential-like name (password, secret, token, api key) that
looks like a real value rather than a placeholder, a header name or an environment variable name.
The secret itself is never repeated in titles or bodies (the evidence line is where it already is).

Severity policy: a vendor-prefixed token or private key is critical (high for the prefixes that are
also used by public keys, such as Google API keys and JWTs), with high confidence; a password in a
URL and a credential-like literal are high, with medium confidence (the value could still be a
fixture). A password in a URL to a local host (localhost, a loopback address, a one-label name such
as a CI service container `postgres` or `mssql2022`) in test configuration (a test runner's or
tool's file: setup.cfg, tox.ini, pytest.ini, noxfile.py; or a fixture) has low confidence: it is
the suite's login to its own database, a person is asked, it is not posted. The same URL in product
code, or one to a real domain anywhere, is reported. Test files get only the vendor-prefix scan,
and a private key among tests or fixtures (a key pair for the suite's own TLS server, far more
often than a leak) has low confidence: a person is asked, it is not posted.

Where a credential sits says what it is. A token anyone can mint (a JWT, a private key) in tests,
fixtures, documentation or an example is the suite's or the reader's sample far more often than a
leak, and a credential-like literal in documentation or an example app is a placeholder by intent
(`app.secret_key = "…"` in `examples/todo/app.py`, Django's startproject settings), as is one in
the test helpers a package ships for its users (`pyramid/testing.py`'s dummy session's fixed CSRF
token, a pytest plugin's bundled key for its local HTTPS test server): low confidence, listed for a
person. A token a vendor issues (AWS, GitHub, Stripe, …) is a
credential wherever it is, and stays high: people do paste real keys into READMEs and tests.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import re
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.kernel.contracts import Severity
from reviewers.paths import is_fixture_path, is_pytest_plugin_path, is_sample_path, is_test_path, is_test_support_path


def _prefixed(head: str, letters: str, tail: str) -> tuple[str, ...]:
    """The literals `head` + one of `letters` + `tail` ("ghp_", "gho_", ...)."""
    return tuple(f"{head}{letter}{tail}" for letter in letters)


@dataclass(frozen=True, slots=True)
class KnownToken:
    name: str
    pattern: re.Pattern[str]
    severity: Severity
    markers: tuple[str, ...]  # literal text every match contains: a line with none of them holds no such token


PRIVATE_KEY = KnownToken(
    "private key",
    re.compile(r"-----BEGIN (?:(?:RSA|EC|DSA|OPENSSH|PGP|ENCRYPTED) )?PRIVATE KEY(?: BLOCK)?-----"),
    "critical",
    ("PRIVATE KEY",),
)
AWS_ACCESS_KEY_ID = KnownToken(
    "AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "critical", ("AKIA", "ASIA")
)
# An access key ID names a key; its secret (40 base64 characters) is the credential. A file with an
# ID and no such secret (a README showing the tool's output with the secret cut to "...") leaks an
# identifier: low confidence, listed for a person, who knows whether the secret is elsewhere.
_AWS_SECRET_KEY = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def aws_secret_in(text: str) -> bool:
    """Whether the text holds a value shaped like an AWS secret access key: 40 base64 characters of
    both cases (a 40-hex git or SHA-1 digest is not one).

    Whether that value is a placeholder does not matter here: the placeholder test belongs to the
    token being judged (the key id, `placeholder_token`), never to its neighbourhood. A real key id
    beside a secret written "...EXAMPLEKEY" is still a real key id next to a slot for its secret
    (issue 40: such an id was only listed); AWS's documented pair is skipped by its id's own name."""
    return any(any(c.isupper() for c in m) and any(c.islower() for c in m) for m in _AWS_SECRET_KEY.findall(text))


JSON_WEB_TOKEN = KnownToken(
    "JSON Web Token",
    re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    "high",
    ("eyJ",),
)
KNOWN_TOKENS: tuple[KnownToken, ...] = (
    KnownToken("Stripe live secret key", re.compile(r"\b[sr]k_live_[0-9A-Za-z]{16,}"), "critical", ("k_live_",)),
    AWS_ACCESS_KEY_ID,
    KnownToken("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), "critical", _prefixed("gh", "pousr", "_")),
    KnownToken(
        "GitHub fine-grained token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), "critical", ("github_pat_",)
    ),
    KnownToken(
        "GitLab token",
        re.compile(r"\bgl(?:pat|rt|dt|ptt|cbt)-[A-Za-z0-9_\-]{20,}"),
        "critical",
        ("glpat-", "glrt-", "gldt-", "glptt-", "glcbt-"),
    ),
    KnownToken(
        "Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), "critical", _prefixed("xox", "abprs", "-")
    ),
    # npm's tokens carry the same checksum as GitHub's (`checksum_fails`)
    KnownToken("npm access token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), "critical", ("npm_",)),
    KnownToken("Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), "high", ("AIza",)),
    KnownToken("OpenAI-style API key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{32,}"), "critical", ("sk-",)),
    KnownToken("SendGrid API key", re.compile(r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}\b"), "critical", ("SG.",)),
    PRIVATE_KEY,
    JSON_WEB_TOKEN,
)
# Tokens anyone can make for themselves: a test suite or a document mints its own, unlike a vendor's key.
SELF_MINTED_TOKENS = frozenset({PRIVATE_KEY, JSON_WEB_TOKEN})

# Most lines hold no vendor token: substring tests of the tokens' literal markers say so (a tenth
# of the cost of one regular-expression search over the line), then one search, rather than one per kind.
_TOKEN_MARKERS = tuple(dict.fromkeys(m for t in KNOWN_TOKENS for m in t.markers))
_ANY_KNOWN_TOKEN = re.compile("|".join(f"(?:{t.pattern.pattern})" for t in KNOWN_TOKENS))
_URL_CREDENTIALS = re.compile(
    r"\b[a-z][a-z0-9+.\-]*://(?P<user>[^/\s:@'\"]+):(?P<password>[^/\s@'\"]+)@(?P<host>[^\s/'\"]+)"
)
_CREDENTIAL_NAME = re.compile(
    r"(?i)(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_\-]?key|apikey|private[_\-]?key|"
    r"access[_\-]?key|client[_\-]?secret|credentials?|auth[_\-]?key|signing[_\-]?key)"
)
# name = "value" / name: "value" / "name": "value" / name => "value" / name := "value"
# Linear in the line's length: a name starts only where no name character precedes it, and every
# repeated part is bounded. Unanchored and unbounded, a 3,000-character run of letters made each
# start position rescan the rest of the line (quadratic: 81 s for one 455-line file, issue 11).
_ASSIGNED_STRING = re.compile(
    r"""(?<![\w.\-"'])(?P<name>["']?[A-Za-z_][\w.\-]{0,100}["']?)\s{0,20}(?::\s{0,20}[\w\[\]., |]{1,60}?\s{0,20})?"""
    r"""(?:=|:|=>|:=)\s{0,20}[rbuRBU]?(?P<quote>["'`])(?P<value>[^"'`\s]{8,200})(?P=quote)"""
)
# Values that are obviously not a real credential.
_PLACEHOLDER = re.compile(
    r"(?i)(example|changeme|change[_\-]me|dummy|placeholder|xxx|\*\*\*|redacted|your[_\-]|<[^>]*>|\$\{|\{\{|%\(|"
    r"%s|fake|sample|secret|passw|todo|^test)"
)
# A vendor-prefixed token that says it is not one: AWS documents AKIAIOSFODNN7EXAMPLE and
# wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY for its examples, and SDK test suites copy them.
_TRUNCATED = ("...", "…")  # what follows a token a document shortened for its reader
# …and one that says where the reader's own goes: `xoxb-YOUR-BOT-TOKEN-HERE` in a migration guide.
_VENDOR_PLACEHOLDER = re.compile(r"(?i)example|dummy|fake|placeholder|x{6}|your[-_]|[-_]here\b")
_EXAMPLE_HOST = re.compile(r"@[^/\s]*example\.(?:com|org|net)|@[^/\s]*\.(?:test|invalid|example)\b")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]+$")  # "API_TOKEN": the name of a variable, not its value
_WORDISH = re.compile(r"^[A-Za-z_\-. /:]+$")  # header names, field names, URLs paths
MIN_NAMED_SECRET_ENTROPY = 2.5  # bits per character: above "aaaaaaaa", below most real passwords
# Budgets, so that no file can hold a reviewer up (what they cut short is said, never dropped):
# a line longer than any hand-written one (looks_generated's limit) is searched for vendor-prefixed
# tokens only, and a file's named-value scan stops after this many characters of added lines.
MAX_SCANNED_LINE_CHARS = 3000
MAX_SCANNED_CHARS_PER_FILE = 500_000


# Files that configure a test runner or a developer tool, never shipped with the product.
TEST_CONFIG_FILES = frozenset({"setup.cfg", "tox.ini", "pytest.ini", "noxfile.py"})
_ONE_LABEL_HOST = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")  # `postgres`, `mssql2022`: a container or service name
_HOST_END = re.compile(r"[:?#;,]")


def is_test_configuration(path: str) -> bool:
    return PurePosixPath(path).name in TEST_CONFIG_FILES or is_fixture_path(path) or is_test_path(path)


def is_local_host(host_and_rest: str) -> bool:
    """Whether the host of a URL (what follows its `@`: `127.0.0.1:5432/test?x=y`, `[::1]`, `db:1433`)
    names this machine or a one-label service name a CI job or a compose file resolves, never a
    domain on the internet."""
    if host_and_rest.startswith("["):
        host = host_and_rest[1:].split("]", 1)[0]
    else:
        host = _HOST_END.split(host_and_rest, maxsplit=1)[0]
    host = host.lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return bool(_ONE_LABEL_HOST.match(host)) and not host.isdigit()
    return address.is_loopback or address.is_unspecified


def shannon_entropy(text: str) -> float:
    """Bits per character of a string's character distribution."""
    if not text:
        return 0.0
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def looks_like_secret_value(value: str) -> bool:
    """A literal assigned to a credential-like name that reads like a real credential."""
    if _PLACEHOLDER.search(value) or _ENV_NAME.match(value) or _WORDISH.match(value):
        return False
    return shannon_entropy(value) >= MIN_NAMED_SECRET_ENTROPY


def _issue(line: int, rule: str, severity: Severity, what: str) -> Issue:
    return Issue(
        confidence="high" if rule == "secrets:known-prefix" else "medium",
        line=line,
        rule=rule,
        severity=severity,
        title=f"Hard-coded {what} committed to the repository",
        body=(
            f"This line adds a {what}. Anyone who can read the repository (and its history, forever) can use "
            "it. Revoke it, load it from the environment or a secret store, and keep it out of the code."
        ),
        kind="secret",
        cwe="CWE-798",
    )


@dataclass(frozen=True, slots=True)
class SecretScan:
    issues: list[Issue]
    cut_short: str | None = None  # what the budgets left unscanned, in words; None when nothing


def secret_issues(file: ChangedFile, *, named_values: bool = True) -> list[Issue]:
    return scan_secrets(file, named_values=named_values).issues


_VENDOR_PREFIX = re.compile(r"^[A-Za-z]{2,8}[-_]")  # `xoxb-`, `ghp_`, `sk-`: the part every token shares
# GitHub's tokens since 2021 (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`) and npm's (`npm_`) end in a
# checksum: 30 random base62 characters, then their CRC32 in 6 base62 digits (0-9, A-Z, a-z), padded
# with "0" (github.blog, "Behind GitHub's new authentication token formats", 2021-04-05). A value of
# that shape whose checksum does not hold was never issued: a docs page's or a test's made-up token.
_CHECKSUMMED = re.compile(r"^(?:gh[pousr]|npm)_(?P<body>[A-Za-z0-9]{30})(?P<sum>[A-Za-z0-9]{6})$")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def base62_crc32(body: str) -> str:
    """The 6-character base62 CRC32 GitHub and npm append to a token's random body."""
    number = zlib.crc32(body.encode("ascii"))
    digits = ""
    while number:
        number, remainder = divmod(number, 62)
        digits = _BASE62[remainder] + digits
    return digits.rjust(6, "0")


def checksum_fails(token: str) -> bool:
    """Whether a token of a checksummed format carries a checksum that does not hold (False for
    every other token: no checksum, nothing to say)."""
    shaped = _CHECKSUMMED.match(token)
    return shaped is not None and base62_crc32(shaped["body"]) != shaped["sum"]


def placeholder_token(line: str, value: re.Match[str]) -> bool:
    """Whether a vendor-token match on `line` is a placeholder: by name (AWS's documented
    AKIAIOSFODNN7EXAMPLE), by shape (`xoxb-4426949411-aEM7...`, cut short for the reader), by
    its made-up body: a vendor issues random tokens, and a body of a few repeated characters
    (`xoxb-111-222-xxxxx` in a docs page's "never do this") carries under `MIN_NAMED_SECRET_ENTROPY`
    bits per character, where a random one of the same length carries over four; or by a checksum
    the vendor would have made hold (`checksum_fails`)."""
    token = value.group(0)
    return (
        bool(_VENDOR_PLACEHOLDER.search(token))
        or line[value.end() :].startswith(_TRUNCATED)
        or shannon_entropy(_VENDOR_PREFIX.sub("", token, count=1)) < MIN_NAMED_SECRET_ENTROPY
        or checksum_fails(token)
    )


def token_digest(text: str) -> str | None:
    """A digest of the first vendor token in `text` (a finding's evidence), so that one credential
    pasted in several places is told apart from several credentials without the value itself
    leaving this module; None where there is no token, or only a private key's header (every
    key of a kind has the same one)."""
    value = _ANY_KNOWN_TOKEN.search(text) if any(m in text for m in _TOKEN_MARKERS) else None
    if value is None or PRIVATE_KEY.pattern.fullmatch(value.group(0)):
        return None
    return hashlib.sha256(value.group(0).encode()).hexdigest()[:16]


def _kept_elsewhere(file: ChangedFile, token: str, changed: dict[int, str]) -> bool:
    """Whether the token's exact value is on a line of the file the change did not add (a docs page's
    example token, copied for one more example): if it is a leak, the change did not make it."""
    return any(token in text for n, text in enumerate(file.lines, start=1) if n not in changed)


def vendor_token_lines(text: str) -> int:
    """How many lines of a file hold a vendor-prefixed token that is not a placeholder by name or
    shape (the same test `scan_secrets` makes of an added line)."""
    count = 0
    for line in text.splitlines():
        if len(line) > MAX_SCANNED_LINE_CHARS or not any(m in line for m in _TOKEN_MARKERS):
            continue
        value = _ANY_KNOWN_TOKEN.search(line)
        if value and not placeholder_token(line, value):
            count += 1
    return count


def scan_secrets(file: ChangedFile, *, named_values: bool = True) -> SecretScan:
    """Credentials on the lines this change added. `named_values=False` keeps only the unambiguous
    signals (vendor prefixes, private keys): test fixtures are full of fake passwords."""
    issues: list[Issue] = []
    test_material = is_test_path(file.path) or is_fixture_path(file.path)
    sample = is_sample_path(file.path) or is_test_support_path(file.path) or is_pytest_plugin_path(file.path)
    long_lines = 0
    scanned = 0
    unscanned_from: int | None = None
    changed = file.changed_lines
    aws_secret: bool | None = None
    for line, text in sorted(changed.items()):
        token = (
            next((t for t in KNOWN_TOKENS if t.pattern.search(text)), None)
            if any(m in text for m in _TOKEN_MARKERS) and _ANY_KNOWN_TOKEN.search(text)
            else None
        )
        if token is not None and (value := token.pattern.search(text)) and placeholder_token(text, value):
            continue
        if token is not None and value and _kept_elsewhere(file, value.group(0), changed):
            continue  # the same value already sits on a line the change kept: copied, not leaked here
        if token is not None:
            issue = _issue(line, "secrets:known-prefix", token.severity, token.name)
            self_minted = token in SELF_MINTED_TOKENS and (test_material or sample)
            if token is AWS_ACCESS_KEY_ID and aws_secret is None:
                aws_secret = aws_secret_in(file.text)  # read once per file, however many ids it holds
            lone_id = token is AWS_ACCESS_KEY_ID and not aws_secret
            issues.append(replace(issue, confidence="low") if self_minted or lone_id else issue)
            continue
        if not named_values:
            continue
        if len(text) > MAX_SCANNED_LINE_CHARS:
            long_lines += 1
            continue
        scanned += len(text)
        if scanned > MAX_SCANNED_CHARS_PER_FILE:
            unscanned_from = line if unscanned_from is None else unscanned_from
            continue
        url = _URL_CREDENTIALS.search(text) if "://" in text else None
        if url and looks_like_secret_value(url.group("password")) and not _EXAMPLE_HOST.search(url.group(0)):
            issue = _issue(line, "secrets:url-credentials", "high", "password in a URL")
            suite_login = is_test_configuration(file.path) and is_local_host(url.group("host"))
            issues.append(replace(issue, confidence="low") if suite_login else issue)
            continue
        # a name the credential pattern matches is part of the line: no match in the line, no finding
        for match in _ASSIGNED_STRING.finditer(text) if _CREDENTIAL_NAME.search(text) else ():
            if _CREDENTIAL_NAME.search(match.group("name")) and looks_like_secret_value(match.group("value")):
                issue = _issue(line, "secrets:named-literal", "high", "credential")
                issues.append(replace(issue, confidence="low") if sample else issue)
                break
    cut: list[str] = []
    if long_lines:
        cut.append(f"{long_lines} line(s) over {MAX_SCANNED_LINE_CHARS} characters searched for vendor tokens only")
    if unscanned_from is not None:
        cut.append(
            f"named credentials not searched from line {unscanned_from} on "
            f"(budget {MAX_SCANNED_CHARS_PER_FILE} characters)"
        )
    return SecretScan(issues, "; ".join(cut) or None)
