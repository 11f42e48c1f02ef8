"""The Kubernetes manifests: they parse, and the fields that decide whether a deployment works are right.

Commands, options and settings are checked against the live code (the Typer app, `Settings`), images
against the pins in deploy/, secrets against the rule that no value is written into a manifest.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml
from deploy_files import (
    DEPLOY,
    K8S,
    OUR_IMAGES,
    SECRET_NAME,
    Container,
    Doc,
    check_invocation,
    cli_commands,
    containers,
    env_names,
    find,
    k8s_docs,
    load_docs,
    pod_labels,
    pod_spec,
    project_version,
    settings_env_names,
    split_image,
    unknown_env_name,
    yaml_files,
)

SECRET_TEMPLATE = "secret.example.yaml"
SECRET = "reviewloop"
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return k8s_docs()


@pytest.fixture(scope="module")
def ours(docs: list[Doc]) -> list[Container]:
    return [c for c in containers(docs) if c.ours]


def test_every_yaml_file_in_deploy_parses() -> None:
    files = yaml_files()
    assert len(files) >= 10, f"expected the compose file, collector config and k8s manifests, found {files}"
    for path in files:
        docs = load_docs(path)
        assert docs, f"{path} holds no YAML document"
        for doc in docs:
            assert isinstance(doc.body, dict), f"{doc}: a document must be a mapping"


def test_every_k8s_object_has_api_version_kind_and_name(docs: list[Doc]) -> None:
    for doc in docs:
        assert doc.body.get("apiVersion"), f"{doc}: no apiVersion"
        assert doc.kind, f"{doc}: no kind"
        assert doc.name, f"{doc}: no metadata.name"


def test_kustomization_lists_every_manifest_but_the_secret_template() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert SECRET_TEMPLATE not in listed, "applying the template would overwrite the real Secret with placeholders"
    assert listed == present - {SECRET_TEMPLATE}, (
        f"kustomization.yaml lists {sorted(listed)}, folder has {sorted(present)}"
    )
    assert kustomization["namespace"] == "reviewloop"
    overridden = {entry["name"]: entry for entry in kustomization["images"]}
    assert set(overridden) == OUR_IMAGES, "kustomization.yaml must point both reviewloop images at a registry"
    for entry in overridden.values():
        assert entry["newTag"] == project_version(), f"image {entry['name']} tag {entry['newTag']} != project version"


def test_images_are_pinned_and_ours_carry_the_project_version(docs: list[Doc]) -> None:
    for container in containers(docs):
        name, tag = split_image(container.image)
        assert tag is not None and tag != "latest", f"{container}: image {container.image!r} needs a pinned tag"
        if container.ours:
            assert tag == project_version(), f"{container}: {container.image} is not release {project_version()}"


def test_vllm_image_is_the_version_pinned_for_training(docs: list[Doc]) -> None:
    pins = dict(
        line.split("==", 1) for line in (DEPLOY / "constraints-gpu.txt").read_text().splitlines() if "==" in line
    )
    vllm = [c for c in containers(docs) if c.image_name == "vllm/vllm-openai"]
    assert len(vllm) == 1, "one vLLM container expected"
    assert split_image(vllm[0].image)[1] == f"v{pins['vllm'].strip()}", "serving and training must use one vLLM"


def test_our_containers_run_real_reviewloop_commands(ours: list[Container]) -> None:
    commands = cli_commands()
    problems = []
    for container in ours:
        command = container.spec.get("command")
        # the entrypoint, or the same command line started once per GPU by `accelerate launch -m api`
        data_parallel = (
            command is not None and command[:2] == ["accelerate", "launch"] and command[-2:] == ["-m", "api"]
        )
        assert command in (None, ["reviewloop"]) or data_parallel, f"{container}: keep the `reviewloop` entrypoint"
        args = container.spec.get("args")
        assert args, f"{container}: name the reviewloop subcommand in args"
        problem = check_invocation([str(a) for a in args], commands, str(container))
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)


def test_the_expected_workloads_run_the_expected_commands(docs: list[Doc]) -> None:
    def args(kind: str, name: str, container: str) -> list[str]:
        spec = pod_spec(find(docs, kind, name))
        every = spec.get("initContainers", []) + spec["containers"]
        return [str(a) for a in next(c for c in every if c["name"] == container)["args"]]

    assert args("Deployment", "reviewloop-api", "api")[0] == "serve"
    assert args("Deployment", "reviewloop-api", "migrate") == ["db", "upgrade"]
    assert args("Deployment", "reviewloop-worker", "worker")[0] == "worker"
    assert args("CronJob", "reviewloop-retrain", "retrain") == ["retrain"]


def test_env_names_are_real_settings(docs: list[Doc], ours: list[Container]) -> None:
    settings = settings_env_names()
    problems = [
        f"{container}: {name} (from {source}) is neither a field of agent.service_settings.Settings nor OTEL_*"
        for container in ours
        for name, source in env_names(container, docs).items()
        if unknown_env_name(name, settings)
    ]
    assert not problems, "\n".join(problems)
    config = find(docs, "ConfigMap", "reviewloop-config").body["data"]
    unknown = [k for k in config if unknown_env_name(k, settings)]
    assert not unknown, f"ConfigMap reviewloop-config has keys no setting reads: {unknown}"


def test_every_container_has_resources(docs: list[Doc]) -> None:
    for container in containers(docs):
        resources = container.spec.get("resources", {})
        requests, limits = resources.get("requests", {}), resources.get("limits", {})
        assert "cpu" in requests and "memory" in requests, f"{container}: requests need cpu and memory"
        assert "memory" in limits, f"{container}: a memory limit keeps one pod from starving its node"


def test_pods_run_as_non_root_without_privilege_escalation(docs: list[Doc]) -> None:
    for doc in docs:
        if doc.kind not in {"Deployment", "StatefulSet", "CronJob"}:
            continue
        spec = pod_spec(doc)
        assert spec["securityContext"]["runAsNonRoot"] is True, f"{doc}: runAsNonRoot"
        # the namespace enforces the `restricted` Pod Security Standard, which requires these
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", f"{doc}: seccompProfile"
        assert spec.get("automountServiceAccountToken") is False, f"{doc}: no pod here talks to the Kubernetes API"
    for container in containers(docs):
        sc = container.spec.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, f"{container}: allowPrivilegeEscalation: false"
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{container}: drop all capabilities"


def _probe_path(container: Container, probe: str) -> str:
    spec = container.spec.get(probe)
    assert spec is not None, f"{container}: no {probe}"
    port = spec["httpGet"]["port"]
    ports = {p["name"]: p["containerPort"] for p in container.spec.get("ports", [])}
    assert port in ports or port in ports.values(), f"{container}: {probe} targets port {port} it does not expose"
    return str(spec["httpGet"]["path"])


def test_api_probes_and_replicas(docs: list[Doc]) -> None:
    api = find(docs, "Deployment", "reviewloop-api")
    assert api.body["spec"]["replicas"] >= 2, "two API replicas: a rollout or a node loss must not drop webhooks"
    container = next(c for c in containers([api]) if c.name == "api")
    assert _probe_path(container, "readinessProbe") == "/readyz"
    assert _probe_path(container, "livenessProbe") == "/healthz"
    args = [str(a) for a in container.spec["args"]]
    port = int(args[args.index("--port") + 1])
    assert container.spec["ports"][0]["containerPort"] == port, "the container port is the one `serve` listens on"
    assert "0.0.0.0" in args, "serve must listen on all interfaces inside a pod"


def test_api_routes_match_the_probe_paths() -> None:
    from api.routes import health

    paths = {getattr(route, "path", None) for route in health.router.routes}
    assert {"/healthz", "/readyz"} <= paths


def test_services_and_ingress_reach_their_pods(docs: list[Doc]) -> None:
    workloads = [d for d in docs if d.kind in {"Deployment", "StatefulSet"}]
    for service in (d for d in docs if d.kind == "Service"):
        selector = service.body["spec"]["selector"]
        targets = [w for w in workloads if selector.items() <= pod_labels(w).items()]
        assert len(targets) == 1, f"{service}: selector {selector} matches {len(targets)} workloads"
        port_names = {p["name"] for c in containers(targets) for p in c.spec.get("ports", [])}
        for port in service.body["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{service}: targetPort {port['targetPort']} is not a pod port"
    ingress = find(docs, "Ingress", "reviewloop")
    backends = [
        path["backend"]["service"]["name"] for rule in ingress.body["spec"]["rules"] for path in rule["http"]["paths"]
    ]
    assert backends == ["reviewloop-api"], "GitLab reaches /webhooks/gitlab through the API service"


def test_services_named_in_settings_exist(docs: list[Doc]) -> None:
    config = find(docs, "ConfigMap", "reviewloop-config").body["data"]
    services = {d.name: d for d in docs if d.kind == "Service"}
    for key in ("REVIEWLOOP_LLM_BASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        match = re.match(r"^http://([a-z0-9-]+):(\d+)", config[key])
        assert match, f"{key}={config[key]!r} should name an in-cluster service"
        service = services.get(match.group(1))
        assert service is not None, f"{key} names service {match.group(1)}, which the manifests do not define"
        assert int(match.group(2)) in {p["port"] for p in service.body["spec"]["ports"]}
    assert config["REVIEWLOOP_LLM_BASE_URL"].endswith("/v1"), "the OpenAI client expects the /v1 base"


def test_no_secret_value_is_written_into_a_manifest(docs: list[Doc]) -> None:
    for doc in docs:
        if doc.kind == "Secret":
            assert doc.path.name == SECRET_TEMPLATE, f"{doc}: Secrets are created from a file outside git"
            values = {**doc.body.get("stringData", {}), **doc.body.get("data", {})}
            for key, value in values.items():
                assert re.fullmatch(r"<[^<>]*>|", str(value)), f"{doc}: {key} must be a <placeholder>, not a value"
        if doc.kind == "ConfigMap":
            leaked = [k for k in doc.body.get("data", {}) if SECRET_NAME.search(k)]
            assert not leaked, f"{doc}: {leaked} are secrets and belong in the Secret"
    for container in containers(docs):
        for entry in container.spec.get("env", []):
            if SECRET_NAME.search(entry["name"]) or entry["name"] == "HF_TOKEN":
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                assert ref is not None, f"{container}: {entry['name']} must come from a secretKeyRef"


def test_secret_references_are_covered_by_the_template(docs: list[Doc]) -> None:
    template = find(docs, "Secret", SECRET)
    keys = set(template.body["stringData"])
    for container in containers(docs):
        for entry in container.spec.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == SECRET, f"{container}: one Secret, `{SECRET}`"
                assert ref["key"] in keys, f"{container}: key {ref['key']} is missing from {SECRET_TEMPLATE}"
    for key in keys:
        if key.startswith("REVIEWLOOP_"):
            assert key in settings_env_names(), f"{SECRET_TEMPLATE}: {key} is not a setting"
    example = DEPLOY / "k8s" / "secrets.env.example"
    listed = {line.split("=", 1)[0] for line in example.read_text().splitlines() if "=" in line and line[0] != "#"}
    assert listed == keys, "secrets.env.example and secret.example.yaml must name the same keys"


def test_worker_scales_on_queue_depth_with_keda(docs: list[Doc]) -> None:
    from api.worker import QUEUE_TABLE, REVIEW_QUEUE

    scaled = find(docs, "ScaledObject", "reviewloop-worker").body["spec"]
    target = find(docs, "Deployment", scaled["scaleTargetRef"]["name"])
    assert "replicas" not in target.body["spec"], "the autoscaler owns the worker count"
    assert scaled["minReplicaCount"] >= 1 and scaled["maxReplicaCount"] > scaled["minReplicaCount"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "postgresql"
    query = trigger["metadata"]["query"]
    assert QUEUE_TABLE in query and f"'{REVIEW_QUEUE}'" in query, "the query must read the review queue"
    auth = find(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"]).body["spec"]
    (ref,) = auth["secretTargetRef"]
    assert ref["parameter"] == "connection" and ref["name"] == SECRET
    assert ref["key"] in find(docs, "Secret", SECRET).body["stringData"]
    worker = next(c for c in containers([find(docs, "Deployment", "reviewloop-worker")]) if c.name == "worker")
    concurrency = next(a.split("=", 1)[1] for a in worker.spec["args"] if str(a).startswith("--concurrency="))
    assert trigger["metadata"]["targetQueryValue"] == concurrency, "one worker per `--concurrency` queued reviews"


def _gpu_count(container: Container) -> tuple[int, int]:
    resources = container.spec["resources"]
    return int(resources["requests"].get(GPU, 0)), int(resources["limits"].get(GPU, 0))


def _on_gpu_nodes(doc: Doc) -> None:
    spec = pod_spec(doc)
    assert spec.get("nodeSelector"), f"{doc}: pin to GPU nodes with a nodeSelector"
    assert any(t.get("key") == GPU for t in spec.get("tolerations", [])), f"{doc}: tolerate the GPU taint"


def test_vllm_serves_lora_on_a_gpu(docs: list[Doc]) -> None:
    from learning.train_configs import SFTTrainingConfig

    doc = find(docs, "Deployment", "reviewloop-vllm")
    (container,) = containers([doc])
    assert _gpu_count(container) == (1, 1), "vLLM needs one GPU, requested and limited"
    _on_gpu_nodes(doc)
    args = [str(a) for a in container.spec["args"]]
    options = dict(a.removeprefix("--").split("=", 1) for a in args if a.startswith("--") and "=" in a)
    assert "--enable-lora" in args
    assert int(options["max-loras"]) >= 2, "the promoted adapter and the candidate under evaluation"
    assert int(options["max-lora-rank"]) >= SFTTrainingConfig().lora_r, "the adapters we train must fit"
    env = {e["name"]: e for e in container.spec["env"]}
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]["value"] == "True", "promotion loads adapters at run time"
    assert "secretKeyRef" in env["VLLM_API_KEY"]["valueFrom"]
    assert _probe_path(container, "readinessProbe") == "/health"
    assert doc.body["spec"]["replicas"] == 1 and doc.body["spec"]["strategy"]["type"] == "Recreate"
    mounts = {m["name"]: m for m in container.spec["volumeMounts"]}
    assert mounts["models"]["mountPath"] == "/var/lib/reviewloop", "adapter paths must resolve as in retrain"


def test_retrain_cronjob(docs: list[Doc]) -> None:
    doc = find(docs, "CronJob", "reviewloop-retrain")
    spec = doc.body["spec"]
    assert spec["concurrencyPolicy"] == "Forbid", "two retrains never run at once"
    assert len(spec["schedule"].split()) == 5
    assert spec["startingDeadlineSeconds"] > 0
    assert spec["jobTemplate"]["spec"]["backoffLimit"] <= 2
    assert pod_spec(doc)["restartPolicy"] == "Never"
    (container,) = containers([doc])
    assert container.image_name == "reviewloop-gpu"
    assert _gpu_count(container) == (1, 1)
    _on_gpu_nodes(doc)
    vllm_mounts = {
        m["name"]: m["mountPath"]
        for c in containers([find(docs, "Deployment", "reviewloop-vllm")])
        for m in c.spec["volumeMounts"]
    }
    mounts = {m["name"]: m["mountPath"] for m in container.spec["volumeMounts"]}
    assert mounts["models"] == vllm_mounts["models"], "retrain writes adapters where vLLM reads them"
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec(doc)["volumes"]
        if "persistentVolumeClaim" in v
    }
    pvc = find(docs, "PersistentVolumeClaim", claims["models"])
    assert pvc.body["spec"]["accessModes"] == ["ReadWriteMany"], "retrain and vLLM may be on different nodes"


def test_data_parallel_rl_starts_one_process_per_requested_gpu(docs: list[Doc]) -> None:
    doc = find(docs, "CronJob", "reviewloop-rl-multigpu")
    assert doc.body["spec"]["suspend"] is True, "started by hand, never on its own"
    spec = pod_spec(doc)
    [rl] = spec["containers"]
    command = [str(c) for c in rl["command"]]
    assert "--multi_gpu" in command
    processes = int(command[command.index("--num_processes") + 1])
    assert processes > 1 and int(rl["resources"]["limits"]["nvidia.com/gpu"]) == processes
    assert rl["args"][:2] == ["train", "rl"]
    [make_env] = spec["initContainers"]
    assert make_env["args"][:2] == ["dev", "make-env"]
    replay = rl["args"][rl["args"].index("--replay") + 1]
    assert replay == make_env["args"][make_env["args"].index("--out") + 1], "RL trains on the environment built"


def test_collector_config_in_the_configmap_is_deploy_otel_collector_yaml(docs: list[Doc]) -> None:
    embedded = yaml.safe_load(find(docs, "ConfigMap", "reviewloop-otel-collector").body["data"]["config.yaml"])
    assert embedded == yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text(encoding="utf-8"))


# The oldest Kubernetes the README supports (CronJob `timeZone` is GA there) and the newest schemas.
SCHEMA_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
# Custom resources of KEDA: no schema ships for them; their fields are checked by hand above.
CUSTOM_KINDS = frozenset({"ScaledObject", "TriggerAuthentication"})


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_manifests_match_the_kubernetes_schemas_strictly(docs: list[Doc], version: str) -> None:
    problems = []
    for doc in docs:
        if doc.kind in CUSTOM_KINDS:
            continue
        try:
            # strict: an unknown or misplaced field (a typo, a wrong indent) is an error, not ignored
            kubernetes_validate.validate(doc.body, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
    assert not problems, "\n".join(problems)


def test_kustomize_renders_the_manifests_with_our_registry() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the schema test above still validates every manifest")
    rendered = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, rendered.stderr
    objects = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == {"reviewloop"}
    images = {c["image"] for o in objects for c in _all_containers(o)}
    assert not {i for i in images if split_image(i)[0] in OUR_IMAGES}, "kustomize must rewrite our image names"
    assert any(i.endswith(f"/reviewloop:{project_version()}") for i in images)
    assert not any(o["kind"] == "Secret" for o in objects), "the real Secret is never part of the manifests"


def _all_containers(obj: dict[str, object]) -> list[dict[str, str]]:
    spec: object = obj.get("spec", {})
    for key in ("jobTemplate", "spec", "template", "spec"):
        if isinstance(spec, dict) and key in spec:
            spec = spec[key]
    if not isinstance(spec, dict):
        return []
    return [*spec.get("initContainers", []), *spec.get("containers", [])]
