"""A synthetic replay set: generated merge requests whose planted problems sit in particular files.

For tests and CPU demos of StraTA RL, where no labeled history exists. Each merge request changes a
few files with neutral names (`src/alder.js`, `docs/birch.md`: no name says "risky"); some source
files gain code with a real vulnerable pattern the security reviewer detects (SQL built by
interpolating request data, a shell command from request data, unsafe YAML, eval of request data,
TLS checks off, a hard-coded token with a known prefix: JavaScript and Go sinks are judged by where
their data comes from, so the planted ones read the request); the other files gain harmless
changes. The planted lines are the labeled, accepted findings. Under a small step budget
(`ReplayEnvConfig.step_budget_cap`) a strategy finds a problem only by focusing its file first.

Held-out cases are drawn from names and a directory layout that no training case uses (`app/oak.js`
beside `doc/oak.md`, where training had `src/alder.js` beside `docs/alder.md`): a constant plan, or
one that remembers training paths, earns nothing there; only reading s1 carries over.

The problem files are knowable from s1, by the signals the config names:
- `file_kind`: the decoys are documentation, tests and deploy config; the problems are in the source
  file (the lesson: read the code before the docs);
- `description`: the description names the problem files;
- `size`: the problem files' diffs are larger.
Python templates exist too, but bandit starts a process per new file text, so tests use JavaScript
and Go, whose checks are in-process line rules.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from agent.strategy import Strategy
from learning.envgen.plants import fake_token
from learning.replay import ReplayCase, ReplayFinding
from reviewers.kernel.contracts import PlanItem, Severity
from reviewers.kernel.errors import ConfigError

Language = Literal["javascript", "go", "python"]
Signal = Literal["file_kind", "description", "size"]

# Tree names: neutral, one word each (a tokenizer can keep each whole), none a risk word.
NAME_POOL: tuple[str, ...] = (
    "alder", "birch", "cedar", "maple", "rowan", "hazel", "larch", "aspen",
    "holly", "willow", "spruce", "poplar",
)  # fmt: skip
# Held-out merge requests use other names (and another layout, below): a policy that memorised where
# the problem sat in training, rather than reading s1, gains nothing on them.
HELDOUT_NAME_POOL: tuple[str, ...] = (
    "oak", "elm", "pine", "beech", "yew", "fir", "juniper", "cypress",
    "linden", "sequoia", "hemlock", "tamarack",
)  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """Where a merge request's files live: the source directory and the decoys' path patterns."""

    source: str
    same_kind: str  # directory of every file when s1's signal is not file_kind
    docs: str
    tests: str
    config: str


TRAIN_LAYOUT = Layout("src", "lib", "docs/{name}.md", "tests/{name}.test.{ext}", "deploy/{name}.yml")
HELDOUT_LAYOUT = Layout("app", "modules", "doc/{name}.md", "test/{name}.spec.{ext}", "config/{name}.yaml")
SUFFIX: dict[Language, str] = {"javascript": "js", "go": "go", "python": "py"}
FUNCTION_NAMES = ("loadRecord", "syncState", "buildReport", "fetchItems", "applyChange", "readEntry", "storeValue")
ARG_NAMES = ("value", "name", "entry", "target", "label", "input")
COLUMNS = ("email", "owner", "status", "region", "slug")
TITLES = (
    "Batch of module updates",
    "Refresh internal helpers",
    "Follow-up changes from planning",
    "Iteration on the service code",
    "Small feature batch",
)
SIZE_PADDING_LINES = 8  # extra harmless lines in a problem file under the size signal


@dataclass(frozen=True)
class Template:
    """Lines of a new function; `{fn}`, `{arg}`, `{col}`, `{token}` are filled in. `problem` is the index
    of the line the reviewer reports (None for harmless code)."""

    lines: tuple[str, ...]
    problem: int | None = None
    severity: Severity = "high"
    header: tuple[str, ...] = ()  # lines added at the top of the file (imports)


PROBLEMS: dict[Language, tuple[Template, ...]] = {
    "javascript": (
        Template(
            (
                "export async function {fn}(db, req) {{",
                "  const rows = await db.query(`SELECT id, {col} FROM accounts WHERE {col} = '${{req.query.{arg}}}'`);",
                "  return rows[0];",
                "}}",
            ),
            problem=1,
        ),
        Template(
            (
                "export function {fn}(req) {{",
                "  return child_process.execSync(`tar -czf out.tgz ${{req.body.{arg}}}`);",
                "}}",
            ),
            problem=1,
            header=('import child_process from "child_process";',),
        ),
        Template(("export function {fn}(text) {{", "  return yaml.load(text);", "}}"), problem=1),
        Template(("export function {fn}(req) {{", "  return eval(req.query.{arg});", "}}"), problem=1),
        Template(
            ("export function {fn}(url) {{", "  return https.get(url, {{ rejectUnauthorized: false }});", "}}"),
            problem=1,
        ),
        Template(
            ('const SERVICE_KEY = "{token}";', "export function {fn}() {{", "  return SERVICE_KEY.length;", "}}"),
            problem=0,
            severity="critical",
        ),
    ),
    "go": (
        Template(
            (
                "func {fn}(db *sql.DB, r *http.Request) error {{",
                '\t_, err := db.Exec("DELETE FROM accounts WHERE {col} = \'" + r.FormValue("{arg}") + "\'")',
                "\treturn err",
                "}}",
            ),
            problem=1,
        ),
        Template(
            (
                "func {fn}(r *http.Request) error {{",
                '\treturn exec.Command("sh", "-c", "tar -czf out.tgz " + r.URL.Query().Get("{arg}")).Run()',
                "}}",
            ),
            problem=1,
        ),
        Template(
            (
                "func {fn}() *http.Client {{",
                "\ttr := &http.Transport{{TLSClientConfig: &tls.Config{{InsecureSkipVerify: true}}}}",
                "\treturn &http.Client{{Transport: tr}}",
                "}}",
            ),
            problem=1,
        ),
        Template(
            ('const serviceKey = "{token}"', "", "func {fn}() int {{", "\treturn len(serviceKey)", "}}"), 0, "critical"
        ),
    ),
    "python": (
        Template(
            (
                "def {fn}(conn, {arg}):",
                "    cur = conn.cursor()",
                "    cur.execute(f\"SELECT id FROM accounts WHERE {col} = '{{{arg}}}'\")",
                "    return cur.fetchall()",
            ),
            problem=2,
        ),
        Template(
            ("def {fn}({arg}):", '    return subprocess.run(f"tar -czf out.tgz {{{arg}}}", shell=True, check=False)'),
            problem=1,
            header=("import subprocess",),
        ),
        Template(("def {fn}(text):", "    return yaml.load(text)"), problem=1, header=("import yaml",)),
        Template(('SERVICE_KEY = "{token}"', "", "", "def {fn}():", "    return len(SERVICE_KEY)"), 0, "critical"),
    ),
}

HARMLESS: dict[Language, tuple[Template, ...]] = {
    "javascript": (
        Template(
            (
                "export function {fn}(items) {{",
                "  return items.filter((item) => item.{col} !== undefined).length;",
                "}}",
            )
        ),
        Template(
            (
                "export function {fn}({arg}) {{",
                '  const parts = String({arg}).trim().split(",");',
                "  return parts.map((part) => part.toLowerCase());",
                "}}",
            )
        ),
        Template(("export function {fn}(a, b) {{", "  return Math.max(a, b) - Math.min(a, b);", "}}")),
        Template(("export function {fn}(list) {{", "  return [...new Set(list)].sort();", "}}")),
    ),
    "go": (
        Template(("func {fn}(a, b int) int {{", "\tif a > b {{", "\t\treturn a - b", "\t}}", "\treturn b - a", "}}")),
        Template(("func {fn}({arg} string) string {{", "\treturn strings.ToLower(strings.TrimSpace({arg}))", "}}")),
        Template(("func {fn}(items []string) int {{", "\treturn len(items)", "}}")),
    ),
    "python": (
        Template(("def {fn}(items):", "    return [item for item in items if item is not None]")),
        Template(("def {fn}({arg}):", "    return str({arg}).strip().lower()")),
        Template(("def {fn}(a, b):", "    return max(a, b) - min(a, b)")),
    ),
}
# Decoys of the file_kind signal: (path pattern, old lines, added lines); `{name}`, `{fn}`, `{col}` filled in.
DecoyKind = Literal["docs", "tests", "config"]
# Decoys of the file_kind signal: (old lines, added lines); `{name}`, `{fn}`, `{col}` filled in, the path
# from the layout.
DECOYS: dict[DecoyKind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "docs": (
        ("# {name}", "", "Helpers of the {name} module."),
        ("", "## Usage", "", "Call `{fn}` with the {col} of an account."),
    ),
    "tests": (
        ("// tests of the {name} module", 'test("version", () => expect(version()).toBe("1.0"));'),
        ('test("{fn}", () => expect({fn}([])).toEqual([]));',),
    ),
    "config": (
        ("name: {name}", "replicas: 2"),
        ("retries: 3", "log_format: json"),
    ),
}
PADDING: dict[Language, str] = {
    "javascript": "// step {n} of the update",
    "go": "// step {n} of the update",
    "python": "# step {n} of the update",
}
EXISTING: dict[Language, tuple[str, ...]] = {
    "javascript": ("export function version() {", '  return "1.0";', "}"),
    "go": ("package main", "", "func version() string {", '\treturn "1.0"', "}"),
    "python": ("def version():", '    return "1.0"'),
}


@dataclass(frozen=True)
class SyntheticConfig:
    """The shape of a generated replay set."""

    n_train: int = field(default=32, metadata={"help": "merge requests in the train split"})
    n_eval: int = field(default=16, metadata={"help": "merge requests in the held-out eval split"})
    files_per_case: int = field(default=3, metadata={"help": "changed files per merge request"})
    problems_per_case: int = field(default=1, metadata={"help": "files with a planted problem per merge request"})
    name_pool: int = field(
        default=4,
        metadata={
            "help": "how many neutral module names each split draws from (train and eval from disjoint pools"
            " when heldout_unseen); more names make the policy copy the right one from s1"
        },
    )
    heldout_unseen: bool = field(
        default=True,
        metadata={
            "help": "eval cases use names and a directory layout no train case uses, so what is measured is"
            " reading s1, not remembering a path"
        },
    )
    languages: tuple[Language, ...] = field(
        default=("javascript", "go"), metadata={"help": "languages of the generated files (python runs bandit)"}
    )
    signals: tuple[Signal, ...] = field(
        default=("file_kind",), metadata={"help": "what in s1 reveals the problem files (see the module docstring)"}
    )
    seed: int = field(default=0, metadata={"help": "the same seed gives the same cases"})

    def __post_init__(self) -> None:
        if not 1 <= self.problems_per_case < self.files_per_case:
            raise ConfigError("need 1 <= problems_per_case < files_per_case (decoys must exist)")
        names_needed = self.problems_per_case if "file_kind" in self.signals else self.files_per_case
        if not names_needed <= self.name_pool <= len(NAME_POOL):
            raise ConfigError(f"name_pool must be in [{names_needed}, {len(NAME_POOL)}], got {self.name_pool}")
        if len(HELDOUT_NAME_POOL) < len(NAME_POOL):
            raise ConfigError("the held-out name pool must be as large as the training one")
        if self.n_train < 1 or self.n_eval < 1:
            raise ConfigError("both splits need at least one case")
        if not self.languages or any(lang not in PROBLEMS for lang in self.languages):
            raise ConfigError(f"languages must be among {', '.join(PROBLEMS)}")
        if not self.signals or any(s not in ("file_kind", "description", "size") for s in self.signals):
            raise ConfigError("signals must name file_kind, description and/or size")
        if "file_kind" in self.signals and self.files_per_case - self.problems_per_case > len(DECOYS):
            raise ConfigError(f"file_kind has {len(DECOYS)} decoy kinds: at most that many decoys per case")


def vocabulary_words() -> list[str]:
    """Every name and directory word generated paths can use, train and held-out alike: text for a tiny
    model's tokenizer corpus, so held-out names are words it can spell (a real tokenizer knows English
    words; knowing the words says nothing about which file holds a problem)."""
    words = set(NAME_POOL) | set(HELDOUT_NAME_POOL)
    for layout in (TRAIN_LAYOUT, HELDOUT_LAYOUT):
        for pattern in (layout.source, layout.same_kind, layout.docs, layout.tests, layout.config):
            words.update(w for w in pattern.replace("/", " ").replace(".", " ").split() if "{" not in w)
    return sorted(words)


def _fill(template: Template, rng: random.Random) -> tuple[list[str], list[str]]:
    values = {
        "fn": rng.choice(FUNCTION_NAMES),
        "arg": rng.choice(ARG_NAMES),
        "col": rng.choice(COLUMNS),
        "token": fake_token(rng),
    }
    return [line.format(**values) for line in template.header], [line.format(**values) for line in template.lines]


def file_diff(path: str, old: Sequence[str], new: Sequence[str]) -> str:
    """A git-style unified diff of one modified file."""
    body = difflib.unified_diff(
        [f"{line}\n" for line in old], [f"{line}\n" for line in new], fromfile=f"a/{path}", tofile=f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def _code_file(
    language: Language, template: Template, *, padding: int, rng: random.Random
) -> tuple[list[str], list[str], int | None]:
    """(old lines, new lines, 1-based line of the planted problem or None) of a changed source file."""
    old = list(EXISTING[language])
    header, body = _fill(template, rng)
    pad = [PADDING[language].format(n=n + 1) for n in range(padding)]
    # Go keeps `package` first; the imports of the new code go right after the existing header.
    split_at = 1 if language == "go" else 0
    new = old[:split_at] + header + old[split_at:] + ["", *pad, *body]
    line = len(new) - len(body) + template.problem + 1 if template.problem is not None else None
    return old, new, line


def _decoy_file(
    kind: DecoyKind, name: str, language: Language, layout: Layout, rng: random.Random
) -> tuple[str, list[str], list[str]]:
    old, added = DECOYS[kind]
    pattern = {"docs": layout.docs, "tests": layout.tests, "config": layout.config}[kind]
    values = {"name": name, "fn": rng.choice(FUNCTION_NAMES), "col": rng.choice(COLUMNS), "ext": SUFFIX[language]}
    old_lines = [line.format(**values) for line in old]
    return pattern.format(**values), old_lines, old_lines + [line.format(**values) for line in added]


def generate_case(case_id: str, config: SyntheticConfig, rng: random.Random, *, heldout: bool = False) -> ReplayCase:
    """One merge request: problem files and decoys in random diff order, labels on the planted lines.
    `heldout` draws names and layout from the held-out pools (when the config keeps them apart)."""
    unseen = heldout and config.heldout_unseen
    pool, layout = (HELDOUT_NAME_POOL, HELDOUT_LAYOUT) if unseen else (NAME_POOL, TRAIN_LAYOUT)
    language = rng.choice(config.languages)
    file_kind = "file_kind" in config.signals
    n_decoys = config.files_per_case - config.problems_per_case
    # With file_kind, the decoys document, test and deploy the module the source files belong to.
    names = rng.sample(pool[: config.name_pool], config.problems_per_case if file_kind else config.files_per_case)
    padding = SIZE_PADDING_LINES if "size" in config.signals else 0
    changed: list[tuple[str, list[str], list[str]]] = []
    findings = []
    problems: list[str] = []
    directory = layout.source if file_kind else layout.same_kind
    for name in names[: config.problems_per_case]:
        path = f"{directory}/{name}.{SUFFIX[language]}"
        template = rng.choice(PROBLEMS[language])
        old, new, line = _code_file(language, template, padding=padding, rng=rng)
        if line is not None:
            findings.append(
                ReplayFinding(path=path, line=line, category="security", severity=template.severity, label="accepted")
            )
        problems.append(path)
        changed.append((path, old, new))
    if file_kind:
        changed += [_decoy_file(kind, names[0], language, layout, rng) for kind in rng.sample(list(DECOYS), n_decoys)]
    else:
        for name in names[config.problems_per_case :]:
            old, new, _ = _code_file(language, rng.choice(HARMLESS[language]), padding=0, rng=rng)
            changed.append((f"{directory}/{name}.{SUFFIX[language]}", old, new))
    rng.shuffle(changed)  # diff order says nothing
    order = [path for path, _, _ in changed]
    description = "Updates several modules."
    if "description" in config.signals:
        description = f"Main change in {' and '.join(sorted(problems, key=order.index))}. Other files get small edits."
    title = rng.choice(TITLES)
    diff = "".join(file_diff(path, old, new) for path, old, new in changed)
    files = {path: "\n".join(new) + "\n" for path, _, new in changed}
    # s1 is left to the environment, which renders it with serving's one renderer (agent.strategy_prompt)
    return ReplayCase(case_id=case_id, title=title, description=description, diff=diff, files=files, findings=findings)


def generate_replay_set(config: SyntheticConfig | None = None) -> list[ReplayCase]:
    """`n_train` train cases then `n_eval` eval cases, each with its split set."""
    config = config or SyntheticConfig()
    rng = random.Random(config.seed)
    cases = []
    for i in range(config.n_train + config.n_eval):
        split: Literal["train", "eval"] = "train" if i < config.n_train else "eval"
        case = generate_case(f"synthetic-{config.seed}-{i:04d}", config, rng, heldout=split == "eval")
        cases.append(case.model_copy(update={"split": split}))
    return cases


def changed_paths(case: ReplayCase) -> list[str]:
    """The case's changed files in diff order."""
    return [
        line[len("diff --git a/") :].split(" b/")[0]
        for line in case.diff.splitlines()
        if line.startswith("diff --git ")
    ]


def problem_paths(case: ReplayCase) -> list[str]:
    """The files holding accepted findings, in diff order (what a perfect strategy focuses first)."""
    labeled = {f.path for f in case.findings if f.label == "accepted"}
    return [p for p in changed_paths(case) if p in labeled]


def uninformed_strategy(case: ReplayCase, rng: random.Random, *, max_focus: int | None = None) -> Strategy:
    """A valid strategy that knows nothing of where the problems are: security over the changed files in
    random order (the first `max_focus` of them), one step each. What a warm start may learn the format
    from without being told the answer."""
    paths = changed_paths(case)
    rng.shuffle(paths)
    plan = [PlanItem(reviewer="security", focus_paths=paths[:max_focus], step_budget=1)]
    return Strategy(change_type="feature", plan=plan)
