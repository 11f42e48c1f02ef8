"""deploy/compose.yaml and its env template: services, health checks, commands, and no inline secrets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_files import (
    DEPLOY,
    OUR_IMAGES,
    SECRET_NAME,
    check_invocation,
    cli_commands,
    env_file_entries,
    project_version,
    settings_env_names,
    split_image,
    unknown_env_name,
)

INTERPOLATION = re.compile(r"\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}")
PLACEHOLDERS = {"", "change-me"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def ours(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if split_image(s["image"])[0] in OUR_IMAGES}


def test_the_stack_has_its_services(services: dict[str, dict[str, Any]]) -> None:
    assert {"postgres", "migrate", "api", "worker", "vllm", "otel-collector", "retrain"} <= set(services)


def test_images_are_pinned(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        image, tag = split_image(service["image"])
        assert tag not in (None, "latest"), f"service {name}: pin {service['image']}"
        if image in OUR_IMAGES:
            assert tag == project_version(), f"service {name}: {service['image']} is not release {project_version()}"
            dockerfile = DEPLOY.parent / service["build"]["dockerfile"]
            assert dockerfile.is_file(), f"service {name} builds from {dockerfile}, which does not exist"
            assert service["build"]["context"] == "..", "the build context is the repository root"


def test_long_running_services_have_health_checks(services: dict[str, dict[str, Any]]) -> None:
    for name in ("postgres", "api", "vllm"):
        check = services[name].get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"service {name} needs a health check"
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "/health" in " ".join(services["vllm"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_startup_order(services: dict[str, dict[str, Any]]) -> None:
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker", "retrain"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"service {name} depends on unknown service {dependency}"


def test_our_services_run_real_reviewloop_commands(services: dict[str, dict[str, Any]]) -> None:
    commands = cli_commands()
    problems = []
    for name, service in ours(services).items():
        assert "entrypoint" not in service, f"service {name}: keep the image's `reviewloop` entrypoint"
        problem = check_invocation([str(a) for a in service["command"]], commands, f"compose service {name}")
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["retrain"]["command"] == ["retrain"]


def test_env_names_are_real_settings(services: dict[str, dict[str, Any]]) -> None:
    settings = settings_env_names()
    for name, service in ours(services).items():
        unknown = [key for key in service.get("environment", {}) if unknown_env_name(key, settings)]
        assert not unknown, f"service {name}: {unknown} are not settings"
    example = env_file_entries(DEPLOY / "env.example")
    unknown = [key for key in example if key.startswith("REVIEWLOOP_") and key not in settings]
    assert not unknown, f"deploy/env.example names settings that do not exist: {unknown}"


def test_secrets_come_from_the_env_file_not_the_compose_file(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if not (SECRET_NAME.search(key) or key == "HF_TOKEN"):
                continue
            literal = INTERPOLATION.sub("", str(value))
            if key.endswith("DATABASE_URL"):
                # the DSN's password part must be a ${VARIABLE}
                match = re.match(r"^postgresql://[^:@/]+:(\$\{[^}]+\})@", str(value))
                assert match, f"service {name}: {key} must take its password from ${{POSTGRES_PASSWORD}}"
            else:
                assert literal == "", f"service {name}: {key} is written inline; put it in deploy/.env"
    for name, service in ours(services).items():
        assert service["env_file"] == [".env"], f"service {name} reads its secrets from deploy/.env"
    ignored = (DEPLOY / ".gitignore").read_text(encoding="utf-8").split()
    assert ".env" in ignored, "deploy/.env holds real secrets and must be git-ignored"


def test_env_template_holds_placeholders_only() -> None:
    for key, value in env_file_entries(DEPLOY / "env.example").items():
        if SECRET_NAME.search(key) or key == "HF_TOKEN":
            assert value in PLACEHOLDERS, f"deploy/env.example: {key} must be a placeholder, not {value!r}"


def test_vllm_serves_lora_on_a_gpu(services: dict[str, dict[str, Any]]) -> None:
    vllm = services["vllm"]
    pins = dict(
        line.split("==", 1) for line in (DEPLOY / "constraints-gpu.txt").read_text().splitlines() if "==" in line
    )
    assert split_image(vllm["image"]) == ("vllm/vllm-openai", f"v{pins['vllm'].strip()}")
    args = [str(a) for a in vllm["command"]]
    assert "--enable-lora" in args
    assert any(a.startswith("--max-loras=") for a in args) and any(a.startswith("--max-lora-rank=") for a in args)
    assert args[0].startswith("${REVIEWLOOP_LLM_MODEL"), "vLLM serves the model the service asks for"
    assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    for name in ("vllm", "retrain"):
        (device,) = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"] and device["count"] == 1, f"service {name} needs a GPU"
    mounts = {v.split(":")[0]: v.split(":")[1] for v in vllm["volumes"]}
    retrain_mounts = {v.split(":")[0]: v.split(":")[1] for v in services["retrain"]["volumes"]}
    assert mounts["models"] == retrain_mounts["models"], "adapters are read where retrain writes them"


def test_collector_and_volumes(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    collector = services["otel-collector"]
    source, target, *_ = collector["volumes"][0].split(":")
    assert (DEPLOY / source).resolve() == (DEPLOY / "otel-collector.yaml").resolve()
    assert f"--config={target}" in collector["command"]
    config = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text(encoding="utf-8"))
    traces = config["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"] and "batch" in traces["processors"]
    assert {"debug", "otlphttp"} <= set(traces["exporters"])
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    for name in ("api", "worker"):
        assert services[name]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    declared = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith("."):
                assert source in declared, f"service {name} mounts undeclared volume {source}"


def _validate_compose_schema(path: Path) -> subprocess.CompletedProcess[str]:
    """The Compose Specification's JSON schema, as vendored by check-jsonschema (no Docker needed)."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_compose_file_matches_the_compose_specification(tmp_path: Path) -> None:
    result = _validate_compose_schema(DEPLOY / "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    # the validator must be able to say no: a misspelt key in a copy is refused
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        (DEPLOY / "compose.yaml").read_text(encoding="utf-8").replace("    healthcheck:", "    healthchek:", 1)
    )
    refused = _validate_compose_schema(broken)
    assert refused.returncode != 0 and "healthchek" in refused.stdout
