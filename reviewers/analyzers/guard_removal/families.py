"""The guards a change can take away, as data: what each protects, its CWE, and what to say.

A guard's CWE is its own where it names the weakness it prevents (TLS verification, a constant-time
comparison, an authentication check); a generic check (an allow-list, a pattern, a validator) takes
the CWE of the sink class it stood in front of.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    what: str  # "a containment check", read in "the change removes {what}"
    cwe: str | None  # None: the CWE of the sink class it protects
    strict: bool = False  # only a guard of the same family replaces it (an option, not a check)


# The classes a sink call belongs to, with their CWE: the flow engine's classes and the ones that
# only a removed guard reveals (a route's reach, a comparison, a consumption, a redirect's headers).
CLASS_CWE: dict[str, str] = {
    "sql": "CWE-89", "command": "CWE-78", "code": "CWE-94", "deserialization": "CWE-502", "path": "CWE-22",
    "redirect": "CWE-601", "xxe": "CWE-611", "xpath": "CWE-643", "ldap": "CWE-90", "xss": "CWE-79",
    "template": "CWE-1336", "ssrf": "CWE-918", "auth": "CWE-862", "csrf": "CWE-352", "compare": "CWE-208",
    "dos": "CWE-770", "credentials": "CWE-522", "tls": "CWE-295",
}  # fmt: skip
CLASS_WORDS: dict[str, str] = {
    "sql": "the SQL statement", "command": "the command", "code": "the evaluated code (or attribute lookup)",
    "deserialization": "the deserialiser", "path": "the file path", "redirect": "the redirect",
    "xxe": "the XML parser", "xpath": "the XPath query", "ldap": "the LDAP filter", "xss": "the HTML output",
    "template": "the template", "ssrf": "the outbound request", "auth": "this view", "csrf": "this view",
    "compare": "the comparison", "dos": "the consumer", "credentials": "the redirected request",
    "tls": "the outbound connection",
}  # fmt: skip

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("containment", "a containment check", None),
        Family("safe-join", "a safe-join of the path", "CWE-22"),
        Family("url-check", "a check of the URL's scheme and host", None),
        Family("allow-list", "an allow-list check", None),
        Family("validation", "a validation of the value", None),
        # an early exit on a value's content that no rule reads (`checks`): it replaces only its own kind
        Family("content-check", "a check of the value's content", None),
        Family("validator", "a call to a validator", None),
        Family("checked-by-helper", "a call to a helper that checks the value", None),  # never reported
        Family("pattern", "a pattern check", None),
        Family("sanitizer", "a sanitizer", None),
        Family("escape", "escaping", "CWE-79"),
        Family("autoescape", "autoescaping", "CWE-79", strict=True),
        Family("safe-loader", "a safe loader", "CWE-502", strict=True),
        Family("allow-pickle", "`allow_pickle=False`", "CWE-502", strict=True),
        Family("weights-only", "`weights_only=True`", "CWE-502", strict=True),
        Family("xml-entities", "the XML parser's protection against external entities", "CWE-611", strict=True),
        Family("no-shell", "running the command without a shell", "CWE-78", strict=True),
        Family("end-of-options", "the `--` that ends the command's options before its values", "CWE-88", strict=True),
        Family("tls-verify", "TLS certificate verification", "CWE-295", strict=True),
        Family("tar-filter", "tarfile's extraction filter", "CWE-22", strict=True),
        Family("constant-time", "a constant-time comparison (`hmac.compare_digest`)", "CWE-208", strict=True),
        Family("login", "an authentication check", "CWE-306"),
        Family("permission", "a permission check", "CWE-862"),
        Family("csrf", "CSRF protection", "CWE-352", strict=True),
        Family("header-strip", "stripping credentials from a redirected request", "CWE-522", strict=True),
        Family("size-limit", "a size or count limit", "CWE-770"),
    )
}
