"""What a call is, and the hardening options it carries: the sink classes of a call by its name and
shape, and the guards that are part of the call itself (`shell` off, TLS verification on, a safe
loader, `allow_pickle=False`, the XML parser's entity settings, autoescaping, tarfile's filter, a
size limit). Two versions of a call are one call when only their safe and unsafe variants differ
(`yaml.safe_load` / `yaml.load`, `hmac.compare_digest` / `==`, `defusedxml` / `xml.etree`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from reviewers.analyzers.flow.sinks import CALL_SINKS, SUBPROCESS_CALLS, XML_PARSE_CALLS, XML_PARSER_FACTORIES
from reviewers.analyzers.guard_removal.model import Guard, dotted

# --- what calls are -------------------------------------------------------------------------------

_SHORT_SINKS = {"send_file": "path", "send_from_directory": "path", "redirect": "redirect", "urlopen": "ssrf",
                "FileResponse": "path", "RedirectResponse": "redirect", "HttpResponseRedirect": "redirect"}  # fmt: skip
_METHOD_SINKS = {"execute": "sql", "executemany": "sql", "executescript": "sql", "redirect": "redirect",
                 "extractall": "path", "extract": "path", "read_text": "path", "read_bytes": "path",
                 "write_text": "path", "write_bytes": "path", "send_file": "path",
                 "send_static_file": "path"}  # fmt: skip
_YAML = frozenset({"yaml.load", "yaml.safe_load", "yaml.full_load", "yaml.unsafe_load", "yaml.load_all",
                   "yaml.safe_load_all", "yaml.full_load_all", "yaml.unsafe_load_all"})  # fmt: skip
SAFE_LOADERS = frozenset({"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"})
_HTTP_LIBRARIES = ("requests.", "httpx.", "aiohttp.", "urllib3.", "urllib.request.")
_HTTP_METHODS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "request", "send", "stream"})
# Parsers that build plain data, and deserialisers whose payload can run code: a change that swaps
# the first for the second on the same input takes away a safe loader.
_DATA_ONLY = frozenset({"json", "simplejson", "ujson", "orjson", "rapidjson"})
_CODE_LOADERS = frozenset({"pickle", "_pickle", "cPickle", "dill", "marshal", "cloudpickle"})
# Standard-library TLS clients (and upgrades) that skip certificate checks without an SSL context.
_TLS_CLIENTS = frozenset({"SMTP_SSL", "IMAP4_SSL", "POP3_SSL", "FTP_TLS", "HTTPSConnection", "starttls", "stls"})
_TEMPLATES = frozenset({"jinja2.Environment", "jinja2.Template", "jinja2.sandbox.SandboxedEnvironment"})
_XML_CALLS = (
    XML_PARSE_CALLS | XML_PARSER_FACTORIES | {"xml.etree.ElementTree.fromstring", "xml.etree.ElementTree.parse"}
)
SIZE_KEYWORDS = frozenset({"max_size", "max_length", "max_content_length", "max_bytes", "max_body_size",
                           "max_num_fields", "max_fields", "max_files", "max_count", "max_entries", "max_depth",
                           "max_form_memory_size", "max_form_parts", "max_items", "max_line_length"})  # fmt: skip
# What reads a whole value into memory or hands it to a parser: where a size limit protects.
CONSUMER_WORDS = ("load", "parse", "decode", "decompress", "read", "unpack", "fromstring", "literal_eval",
                   "match", "search", "findall", "sub", "split", "form", "multipart", "upload", "json",
                   "body")  # fmt: skip


def callee_family(qualified: str) -> str:
    """The name two versions of a call share: the safe variant and the unsafe one are one call."""
    if qualified in _YAML:
        return "yaml.load_all" if qualified.endswith("_all") else "yaml.load"
    if qualified.startswith(("xml.etree.cElementTree.", "defusedxml.cElementTree.")):  # one module, two builds
        qualified = qualified.replace(".cElementTree.", ".ElementTree.", 1)
    if qualified.startswith("defusedxml."):
        rest = qualified.removeprefix("defusedxml.")
        return {"lxml": "lxml.etree"}.get(rest.split(".")[0], "xml.etree." + rest.split(".")[0]) + (
            "." + rest.split(".", 1)[1] if "." in rest else ""
        )
    module, _, function = qualified.rpartition(".")
    if function in ("loads", "load") and module in _DATA_ONLY | _CODE_LOADERS:
        return f"<deserialise>.{function}"  # `json.loads` and `pickle.loads` read one payload, one runs code
    if qualified in ("hmac.compare_digest", "secrets.compare_digest"):
        return "=="
    if qualified == "ast.literal_eval":
        return "eval"
    return qualified


def ends_options(command: ast.expr, is_const: Callable[[ast.expr], bool]) -> bool:
    """Whether a command's argument list ends its options with `--` before the first value that is
    not a constant: `["git", "clone", "--", url]` keeps a URL such as `--upload-pack=...` from being
    read as an option (CWE-88)."""
    if not isinstance(command, ast.List | ast.Tuple):
        return False
    for element in command.elts:
        if isinstance(element, ast.Constant) and element.value == "--":
            return True
        if not is_const(element):
            return False
    return False


def const(expr: ast.expr | None) -> object:
    return expr.value if isinstance(expr, ast.Constant) else ...


def call_options(
    call: ast.Call,
    name: str,
    keywords: dict[str, ast.expr],
    text: str,
    is_const: Callable[[ast.expr], bool],
    in_branch: bool,
) -> tuple[set[str], list[Guard]]:
    """The sink classes of a call (`name` qualified) and the guards its own options are."""
    short = name.rsplit(".", 1)[-1]
    family = callee_family(name)
    classes: set[str] = set()
    own: list[Guard] = []
    if name in CALL_SINKS:
        classes.add(CALL_SINKS[name].cls)
    elif short in _SHORT_SINKS:
        classes.add(_SHORT_SINKS[short])
    if isinstance(call.func, ast.Attribute) and short in _METHOD_SINKS:
        classes.add(_METHOD_SINKS[short])
    if family == "==":
        classes.add("compare")
        own.append(Guard("constant-time", frozenset({"compare"}), frozenset(), call.lineno, text))
    if name in SUBPROCESS_CALLS:
        classes.add("command")
        if const(keywords.get("shell")) is not True:
            own.append(Guard("no-shell", frozenset({"command"}), frozenset(), call.lineno, text))
    if name.startswith(_HTTP_LIBRARIES) or (short in _HTTP_METHODS and {"verify", "verify_ssl"} & set(keywords)):
        classes.add("tls")
        # inside an `if`, `verify=False` is a user's opt-out the code implements, not a decision made here
        if in_branch or not any(const(keywords.get(k)) is False for k in ("verify", "verify_ssl", "ssl")):
            own.append(Guard("tls-verify", frozenset({"tls"}), frozenset(), call.lineno, text))
    if family in ("yaml.load", "yaml.load_all"):
        classes.add("deserialization")
        loader = keywords.get("Loader") or (call.args[1] if len(call.args) > 1 else None)
        if "safe" in name or (loader is not None and dotted(loader).rsplit(".", 1)[-1] in SAFE_LOADERS):
            own.append(Guard("safe-loader", frozenset({"deserialization"}), frozenset(), call.lineno, text))
    if short in _TLS_CLIENTS and (
        name.startswith(("smtplib.", "imaplib.", "poplib.", "ftplib.", "http.client."))
        or (short in ("starttls", "stls") and isinstance(call.func, ast.Attribute))
    ):
        classes.add("tls")  # these verify the server's certificate only when given a context that does
        if keywords.get("context") is not None and const(keywords["context"]) is not None:
            own.append(Guard("tls-verify", frozenset({"tls"}), frozenset(), call.lineno, text, key="context"))
    if family.startswith("<deserialise>."):
        if name.rpartition(".")[0] in _CODE_LOADERS:
            classes.add("deserialization")
        else:  # no sink itself: what a change may take away in front of the code loader it becomes
            own.append(Guard("safe-loader", frozenset({"deserialization"}), frozenset(), call.lineno, text, key="data"))
    if name in ("numpy.load", "np.load"):
        classes.add("deserialization")
        if const(keywords.get("allow_pickle")) is not True:
            own.append(Guard("allow-pickle", frozenset({"deserialization"}), frozenset(), call.lineno, text))
    if name == "torch.load":
        classes.add("deserialization")
        if const(keywords.get("weights_only")) is True:
            own.append(Guard("weights-only", frozenset({"deserialization"}), frozenset(), call.lineno, text))
    if name in ("getattr", "setattr", "delattr") and len(call.args) > 1 and not is_const(call.args[1]):
        classes.add("code")  # an attribute named by data: what a sandbox's attribute check stands in front of
    if name == "eval" or family == "eval":
        classes.add("code")
        if name == "ast.literal_eval":
            own.append(Guard("safe-loader", frozenset({"code"}), frozenset(), call.lineno, text, key="literal"))
    if name in _XML_CALLS or callee_family(name) in _XML_CALLS or name.startswith("defusedxml."):
        classes.add("xxe")
        if name.startswith("defusedxml."):
            own.append(Guard("xml-entities", frozenset({"xxe"}), frozenset(), call.lineno, text, key="defused"))
        if const(keywords.get("resolve_entities")) is False:
            own.append(Guard("xml-entities", frozenset({"xxe"}), frozenset(), call.lineno, text, key="entities"))
        if short == "XMLParser" and const(keywords.get("no_network")) is not False:
            own.append(Guard("xml-entities", frozenset({"xxe"}), frozenset(), call.lineno, text, key="network"))
    if name in _TEMPLATES or short == "Environment":
        classes.add("xss")
        escape = keywords.get("autoescape")
        if escape is not None and const(escape) is not False:
            own.append(Guard("autoescape", frozenset({"xss"}), frozenset(), call.lineno, text))
    if short in ("extractall", "extract") and "filter" in keywords and const(keywords["filter"]) is not None:
        own.append(Guard("tar-filter", frozenset({"path"}), frozenset(), call.lineno, text))
    consumer = any(w in short.lower() for w in CONSUMER_WORDS)
    for keyword in SIZE_KEYWORDS & set(keywords) if consumer else ():
        if const(keywords[keyword]) is not None:
            classes.add("dos")
            own.append(Guard("size-limit", frozenset({"dos"}), frozenset(), call.lineno, text, key=keyword))
    return classes, own
