"""Reading deploy/: YAML documents, containers in Kubernetes workloads, Dockerfiles, and the live CLI.

The checks in this folder compare what the deployment files say with what the code defines (commands,
options, settings), so renaming a command or a setting breaks a test instead of a deployment.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer.main
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "k8s"
OUR_IMAGES = frozenset({"reviewloop", "reviewloop-gpu"})
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"})
# Names a setting may carry when it holds a credential; such values come from a Secret, never inline.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|DATABASE_URL)")


def project_version() -> str:
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return str(data["project"]["version"])


# --- YAML ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    path: Path
    index: int
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.body.get("metadata", {}).get("name", ""))

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}#{self.index} {self.kind}/{self.name}"


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml"})


def load_docs(path: Path) -> list[Doc]:
    with path.open(encoding="utf-8") as fh:
        return [Doc(path, i, body) for i, body in enumerate(yaml.safe_load_all(fh)) if body is not None]


def k8s_docs() -> list[Doc]:
    """Every Kubernetes object in deploy/k8s, the Secret template included."""
    docs: list[Doc] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(load_docs(path))
    return docs


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    matches = [d for d in docs if d.kind == kind and d.name == name]
    assert len(matches) == 1, f"expected one {kind}/{name} in deploy/k8s, found {len(matches)}"
    return matches[0]


def pod_spec(doc: Doc) -> dict[str, Any]:
    spec = doc.body["spec"]
    if doc.kind == "CronJob":
        return dict(spec["jobTemplate"]["spec"]["template"]["spec"])
    return dict(spec["template"]["spec"])


def pod_labels(doc: Doc) -> dict[str, str]:
    spec = doc.body["spec"]
    template = spec["jobTemplate"]["spec"]["template"] if doc.kind == "CronJob" else spec["template"]
    return dict(template.get("metadata", {}).get("labels", {}))


@dataclass(frozen=True)
class Container:
    doc: Doc
    spec: dict[str, Any]
    init: bool

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def image(self) -> str:
        return str(self.spec.get("image", ""))

    @property
    def image_name(self) -> str:
        return split_image(self.image)[0]

    @property
    def ours(self) -> bool:
        return self.image_name in OUR_IMAGES

    def __str__(self) -> str:
        return f"{self.doc} container {self.name}"


def containers(docs: list[Doc]) -> Iterator[Container]:
    for doc in docs:
        if doc.kind not in WORKLOAD_KINDS:
            continue
        spec = pod_spec(doc)
        for c in spec.get("initContainers", []):
            yield Container(doc, c, init=True)
        for c in spec.get("containers", []):
            yield Container(doc, c, init=False)


def split_image(image: str) -> tuple[str, str | None]:
    """`repo/name:tag` → (`repo/name`, `tag`); no tag → None (which means `latest`)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref.rsplit(":", 1)
        return name, tag
    return ref, None


def env_names(container: Container, docs: list[Doc]) -> dict[str, str]:
    """Every environment variable a container gets → where it comes from (for messages)."""
    names: dict[str, str] = {}
    for entry in container.spec.get("env", []):
        names[entry["name"]] = "env"
    for source in container.spec.get("envFrom", []):
        ref = source.get("configMapRef") or source.get("secretRef")
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        for key in find(docs, kind, ref["name"]).body.get("data", {}):
            names[key] = f"{kind}/{ref['name']}"
    return names


# --- the CLI ---------------------------------------------------------------------------------------


@dataclass
class CliCommand:
    path: tuple[str, ...]
    options: frozenset[str] = field(default_factory=frozenset)
    is_group: bool = False


def cli_commands() -> dict[tuple[str, ...], CliCommand]:
    """Every command and group of the live `reviewloop` Typer app, by path, with its option names."""
    import api.cli

    root = typer.main.get_command(api.cli.app)
    found: dict[tuple[str, ...], CliCommand] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        options = {
            opt
            for param in command.params
            # typer vendors its own click: compare by the parameter's kind, not by class
            if getattr(param, "param_type_name", "") == "option"
            for opt in (*param.opts, *param.secondary_opts)
        }
        found[path] = CliCommand(path, frozenset(options | {"--help"}), is_group=isinstance(subcommands, dict))
        if isinstance(subcommands, dict):
            for name, sub in subcommands.items():
                walk(sub, (*path, name))

    walk(root, ())
    return found


def check_invocation(args: list[str], commands: dict[tuple[str, ...], CliCommand], where: str) -> str | None:
    """None when `reviewloop ARGS` names a real command with real options; else what is wrong."""
    known = ", ".join(sorted(" ".join(p) for p, c in commands.items() if p and not c.is_group))
    path: tuple[str, ...] = ()
    rest = list(args)
    while rest and not rest[0].startswith("-") and (*path, rest[0]) in commands:
        path = (*path, rest.pop(0))
    command = commands[path]
    if not path or command.is_group:
        wanted = " ".join([*path, *rest[:1]]) or "(nothing)"
        return f"{where}: `reviewloop {wanted}` is not a command of the CLI (it has: {known})"
    for token in rest:
        if token.startswith("--"):
            option = token.split("=", 1)[0]
            if option not in command.options:
                return (
                    f"{where}: `reviewloop {' '.join(path)}` has no option {option} "
                    f"(it has: {', '.join(sorted(command.options))})"
                )
    return None


# --- settings --------------------------------------------------------------------------------------


def settings_env_names() -> frozenset[str]:
    from agent.service_settings import Settings

    prefix = str(Settings.model_config.get("env_prefix", ""))
    return frozenset(f"{prefix}{name}".upper() for name in Settings.model_fields)


# Variables our containers may carry besides REVIEWLOOP_* settings: OpenTelemetry's own (the SDK reads
# OTEL_*), and the model hub's for training images.
OTHER_ALLOWED_ENV = frozenset({"HF_TOKEN", "HF_HOME"})


def unknown_env_name(name: str, settings: frozenset[str]) -> bool:
    if name.startswith("REVIEWLOOP_"):
        return name not in settings
    return not (name.startswith("OTEL_") or name in OTHER_ALLOWED_ENV)


def env_file_entries(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file, commented-out examples (`# KEY=VALUE`) included."""
    entries: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if match:
            entries[match.group(1)] = match.group(2).strip()
    return entries


# --- Dockerfiles -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    value: str
    stage: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array form's items, or None for the shell form."""
        text = self.value
        if text.startswith("--"):  # HEALTHCHECK options precede CMD
            return None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return None
        return [str(x) for x in parsed] if isinstance(parsed, list) else None


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped; `stage` counts FROMs."""
    logical: list[str] = []
    current = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # comment lines inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        logical.append(current + line)
        current = ""
    if current:
        logical.append(current)
    out: list[Instruction] = []
    stage = -1
    for text in logical:
        keyword, _, value = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(keyword, value.strip(), stage))
    return out


def dockerfile_args(instructions: list[Instruction]) -> dict[str, str]:
    args: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.value:
            key, value = ins.value.split("=", 1)
            args[key.strip()] = value.strip()
    return args


def base_images(instructions: list[Instruction]) -> list[str]:
    """The FROM images with ARG defaults substituted; stage aliases (FROM build) are left out."""
    args = dockerfile_args(instructions)
    aliases: set[str] = set()
    images: list[str] = []
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        parts = ins.value.split()
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
        if len(parts) >= 3 and parts[1].upper() == "AS":
            aliases.add(parts[2])
        if image not in aliases:
            images.append(image)
    return images


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(ins.stage for ins in instructions)
    return [ins for ins in instructions if ins.stage == last]
