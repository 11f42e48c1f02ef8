"""Planted defects and their decoys: the labeled part of a synthesised merge request.

A plant is a small private helper added to a real module (private, so the test-impact reviewer does
not ask for its tests). A *defect* carries a pattern a reviewer targets — SQL built by an f-string
from request data, a shell command from request data, `yaml.load`, `pickle.loads` or `eval` on the
request, a hard-coded token, a mutable default argument, a bare `except:` — and its line is the
label. A *decoy* is a false alarm: code an analyzer flags that is safe where it stands (a dev socket
on all interfaces, TLS checks off for localhost, a best-effort flush-and-close, a lock file under
/tmp); posting on it costs, so its line is a negative label.
"""

from __future__ import annotations

import ast
import random
import string
from dataclasses import dataclass
from typing import Literal

from learning.envgen.edits import after_imports
from reviewers.analyzers.secrets import base62_crc32
from reviewers.kernel.contracts import Category, Severity

PlantRole = Literal["defect", "decoy"]


@dataclass(frozen=True)
class PlantTemplate:
    """Lines of a helper; `{fn}`, `{arg}`, `{col}`, `{table}`, `{const}`, `{token}` are filled in.
    `line` indexes the line that carries the pattern (the label); `imports` are modules it needs."""

    kind: str
    category: Category
    severity: Severity
    lines: tuple[str, ...]
    line: int
    imports: tuple[str, ...] = ()
    sink: str = ""  # text the labeled line contains at head, after filling (checked by tests)


DEFECTS: tuple[PlantTemplate, ...] = (
    # The injections read the request (flask's, imported as a module): a sink fed only by a parameter
    # of unknown origin goes to a person, not a thread (issue 22), so it would be no defect to find.
    PlantTemplate("sql-injection", "security", "high", (
        "def {fn}(connection):",
        '    {arg} = flask.request.args["{col}"]',
        "    cursor = connection.cursor()",
        "    cursor.execute(f\"SELECT id, {col} FROM {table} WHERE {col} = '{{{arg}}}'\")",
        "    return cursor.fetchall()",
    ), 3, ("flask",), sink="cursor.execute(f\""),
    PlantTemplate("shell-injection", "security", "high", (
        "def {fn}():",
        '    {arg} = flask.request.args["{col}"]',
        '    return subprocess.run(f"tar -czf {table}.tgz {{{arg}}}", shell=True, check=False)',
    ), 2, ("subprocess", "flask"), sink="shell=True"),
    PlantTemplate("unsafe-yaml", "security", "high", (
        "def {fn}():",
        "    return yaml.load(flask.request.get_data())",
    ), 1, ("yaml", "flask"), sink="yaml.load("),
    PlantTemplate("unsafe-pickle", "security", "high", (
        "def {fn}():",
        "    return pickle.loads(flask.request.get_data())",
    ), 1, ("pickle", "flask"), sink="pickle.loads("),
    PlantTemplate("code-exec", "security", "high", (
        "def {fn}():",
        '    return eval(flask.request.args["{col}"])',
    ), 1, ("flask",), sink="eval("),
    PlantTemplate("hardcoded-secret", "security", "critical", (
        '{const} = "{token}"',
        "",
        "",
        "def {fn}():",
        '    return {{"Authorization": f"token {{{const}}}"}}',
    ), 0, sink='= "ghp_'),
    PlantTemplate("mutable-default", "code_quality", "medium", (
        "def {fn}({arg}, seen=[]):",
        "    seen.append({arg})",
        "    return len(seen)",
    ), 0, sink="seen=[]"),
    PlantTemplate("bare-except", "code_quality", "medium", (
        "def {fn}({arg}):",
        "    try:",
        "        return int({arg})",
        "    except:",
        "        return None",
    ), 3, sink="except:"),
)  # fmt: skip

# Decoys are false alarms the analyzers DO raise and the verifier keeps (issue 24): code an analyzer
# flags but the team, knowing its context, calls safe — a dev socket on all interfaces, a cache the
# module wrote itself, a TLS check off for localhost, MD5 as an ETag, a best-effort close, a lock file
# under /tmp. Posting one costs. (A constant shell command or `eval` of a literal would not do: the
# verifier already drops those as literals.)
# A pickle of the module's own cache file and MD5 as an ETag were decoys until the taint analysis
# (issue 22): now both go to a person, not a thread, so posting them costs nothing and they are gone.
DECOYS: tuple[PlantTemplate, ...] = (
    PlantTemplate("bind-all", "security", "medium", (
        "def {fn}():",
        "    sock = socket.socket()",
        '    sock.bind(("0.0.0.0", 8080))',
        "    return sock",
    ), 2, ("socket",), sink='bind(("0.0.0.0"'),
    PlantTemplate("tls-verify-off", "security", "high", (
        "def {fn}():",
        '    return requests.get("https://localhost:8443/{table}/health", verify=False, timeout=5)',
    ), 1, ("requests",), sink="verify=False"),
    PlantTemplate("swallowed-error", "code_quality", "medium", (
        "def {fn}({arg}):",
        "    try:",
        "        {arg}.flush()",
        "        {arg}.close()",
        "    except Exception:",
        "        pass",
    ), 4, sink="except Exception:"),
    PlantTemplate("temp-path", "security", "medium", (
        "def {fn}():",
        '    return open("/tmp/{table}.lock", "w")',
    ), 1, sink='open("/tmp/'),
)  # fmt: skip

KINDS: tuple[str, ...] = tuple(t.kind for t in DEFECTS)
_VERBS = ("load", "fetch", "export", "parse", "collect", "resolve", "read", "sync")
_NOUNS = ("rows", "entries", "records", "archive", "payload", "settings", "report", "items")
_ARGS = ("value", "name", "raw", "source", "text", "key")
_COLUMNS = ("email", "owner", "status", "region", "slug")
_TABLES = ("accounts", "jobs", "events", "uploads", "orders")


@dataclass(frozen=True)
class Plant:
    role: PlantRole
    template: PlantTemplate
    anchor: str  # the unique first line of the helper, to find it at head
    sink: str

    @property
    def kind(self) -> str:
        return self.template.kind


def fake_token(rng: random.Random) -> str:
    """A GitHub-shaped token that is random, not anyone's credential: 30 random characters and the
    checksum GitHub's tokens end in (without it the secrets scan knows it for a made-up one). It
    draws 36 characters, as it did before the checksum, so a seed makes the same set as before."""
    drawn = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))
    return "ghp_" + drawn[:30] + base62_crc32(drawn[:30])


def plant(text: str, template: PlantTemplate, role: PlantRole, rng: random.Random) -> tuple[str, Plant] | None:
    """Insert the helper before a random top-level definition (or at the end); None if it cannot parse."""
    tree = ast.parse(text)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    fn = next((name for _ in range(20) if (name := f"_{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}") not in taken), None)
    if fn is None:
        return None
    noun = fn.split("_")[-1].upper()
    values = {
        "fn": fn,
        "arg": rng.choice(_ARGS),
        "col": rng.choice(_COLUMNS),
        "table": rng.choice(_TABLES),
        "const": f"_{noun}_TOKEN",
        "env": f"{noun}_TOKEN",
        "token": fake_token(rng),
    }
    if values["const"] in taken:
        return None
    block = [line.format(**values) for line in template.lines]
    lines = text.splitlines(keepends=True)
    defs = [n for n in tree.body[1:] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    if defs:
        target = rng.choice(defs)
        at = min([target.lineno, *(d.lineno for d in target.decorator_list)]) - 1
        insertion = [f"{line}\n" if line else "\n" for line in block] + ["\n", "\n"]
    else:
        at = len(lines)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        insertion = ["\n", "\n"] + [f"{line}\n" if line else "\n" for line in block]
    lines[at:at] = insertion
    imported = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names if a.asname is None}
    missing = [m for m in template.imports if m not in imported]
    header = after_imports(tree)
    lines[header:header] = [f"import {m}\n" for m in missing]
    edited = "".join(lines)
    try:
        ast.parse(edited)
    except SyntaxError:
        return None
    sink = template.sink.format(**values) if "{" in template.sink else template.sink
    return edited, Plant(role=role, template=template, anchor=block[0], sink=sink)


def labeled_line(text: str, item: Plant) -> int:
    """The 1-based line at head that carries the plant's pattern."""
    lines = text.splitlines()
    start = lines.index(item.anchor)
    return start + item.template.line + 1
