"""The Kubernetes manifests (deploy/kubernetes): valid against Kubernetes' own JSON schemas
(offline, with kubernetes-validate), and consistent with each other and with the worker: the
ports, the Secret's name and key, the labels, the spool volume, the worker's flags. kubectl is
used when it is on the PATH (rendering the kustomization needs no cluster; a client dry run of
`apply` does, for discovery, so it runs only when one answers)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import utils as schemas

from datafusion_distributed import DnsResolver
from datafusion_distributed.cli import build_parser
from datafusion_distributed.cli.worker import STOP_SECONDS
from datafusion_distributed.protocol.auth import TOKEN_ENV

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
# The oldest Kubernetes release still commonly run, and the newest the schemas know.
VERSIONS = ["1.29", schemas.latest_version()]
KUBECTL = shutil.which("kubectl")
KUBECTL_SECONDS = 60


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


RESOURCES = {
    p.name: _documents(p) for p in sorted(MANIFESTS.glob("*.yaml")) if p.name != "kustomization.yaml"
}
KUSTOMIZATION = _documents(MANIFESTS / "kustomization.yaml")[0]


def _by_kind(kind: str) -> dict:
    (found,) = [r for documents in RESOURCES.values() for r in documents if r["kind"] == kind]
    return found


SERVICE = _by_kind("Service")
STATEFULSET = _by_kind("StatefulSet")
SECRET = _by_kind("Secret")
POD = STATEFULSET["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]
WORKER_ARGS = build_parser().parse_args(CONTAINER["args"])


def _validate(resource: dict, version: str) -> None:
    """Kubernetes' schema for the resource's kind; strict: an unknown (misspelt) field fails too."""
    try:
        schemas.validate(resource, version, strict=True)
        return
    except schemas.ValidationError as exc:  # its text repeats the whole schema: keep where and what
        problem = f"{'/'.join(str(p) for p in exc.path)}: {exc.message}"
    pytest.fail(f"{resource['kind']} {resource['metadata']['name']} (Kubernetes {version}): {problem}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(RESOURCES))
def test_each_manifest_is_valid_kubernetes(name, version):
    for resource in RESOURCES[name]:
        _validate(resource, version)


def test_the_kustomization_lists_the_workload_but_not_the_secret_placeholder():
    assert KUSTOMIZATION["kind"] == "Kustomization"
    assert sorted(KUSTOMIZATION["resources"]) == sorted(set(RESOURCES) - {"secret.yaml"})


def test_the_container_runs_the_worker_command_listening_on_all_addresses():
    assert WORKER_ARGS.command == "worker"
    assert WORKER_ARGS.host == "0.0.0.0"
    assert WORKER_ARGS.auth_token is None and not WORKER_ARGS.insecure_no_auth


def test_one_port_everywhere_service_container_probes_worker_flag_and_dns_resolver_default():
    (container_port,) = CONTAINER["ports"]
    (service_port,) = SERVICE["spec"]["ports"]
    assert container_port["containerPort"] == WORKER_ARGS.port
    assert service_port["targetPort"] == container_port["name"]
    assert service_port["port"] == WORKER_ARGS.port, "URLs made from pod addresses use the service's port"
    for probe in ("readinessProbe", "livenessProbe"):
        assert CONTAINER[probe]["tcpSocket"]["port"] == container_port["name"]
    assert DnsResolver("unused").port == WORKER_ARGS.port


def test_the_prestop_hook_drains_the_worker_within_the_grace_period():
    (program, *arguments) = CONTAINER["lifecycle"]["preStop"]["exec"]["command"]
    drain = build_parser().parse_args(arguments)
    assert program == "datafusion-distributed", "the image's entry point, on its PATH"
    assert drain.command == "drain" and drain.wait
    assert drain.urls == [f"grpc://127.0.0.1:{WORKER_ARGS.port}"], "the worker of its own pod"
    assert drain.timeout == WORKER_ARGS.drain_timeout
    # the drain, then the stop (a second), fit in the grace period, with room for the hook to start
    assert WORKER_ARGS.drain_timeout + STOP_SECONDS + 2 <= POD["terminationGracePeriodSeconds"]
    assert POD["terminationGracePeriodSeconds"] <= 30, "Kubernetes' default: nodes drained in time"


def test_the_headless_service_selects_the_worker_pods():
    assert SERVICE["spec"]["clusterIP"] == "None", "headless: its DNS name resolves to every pod"
    assert STATEFULSET["spec"]["serviceName"] == SERVICE["metadata"]["name"]
    pod_labels = STATEFULSET["spec"]["template"]["metadata"]["labels"]
    assert SERVICE["spec"]["selector"].items() <= pod_labels.items()
    assert STATEFULSET["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_the_token_comes_from_the_secret_and_its_placeholder_cannot_serve():
    (token_env,) = [e for e in CONTAINER["env"] if e["name"] == TOKEN_ENV]
    reference = token_env["valueFrom"]["secretKeyRef"]
    assert reference["name"] == SECRET["metadata"]["name"]
    assert reference["key"] in SECRET["stringData"]
    # empty: a worker refuses to start (tests/deploy/test_docker_image.py), so the placeholder
    # can never be a token anyone who reads this repository knows
    assert SECRET["stringData"][reference["key"]] == ""


def _quantity_bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return int(quantity[: -len(unit)]) * factor
    return int(quantity)


def test_the_spool_is_an_empty_dir_the_quota_and_memory_pool_fit_inside_their_limits():
    volumes = {v["name"]: v for v in POD["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in CONTAINER["volumeMounts"]}
    spool = volumes[mounts[WORKER_ARGS.spool_dir]]
    assert "emptyDir" in spool
    assert WORKER_ARGS.spool_quota_bytes < _quantity_bytes(spool["emptyDir"]["sizeLimit"])
    limits, requests = CONTAINER["resources"]["limits"], CONTAINER["resources"]["requests"]
    assert WORKER_ARGS.memory_limit_bytes < _quantity_bytes(limits["memory"])
    assert {"cpu", "memory"} <= requests.keys() and {"cpu", "memory"} <= limits.keys()
    assert CONTAINER["securityContext"]["readOnlyRootFilesystem"]
    assert "/tmp" in mounts, "a read-only root file system still needs a writable /tmp"


def test_the_pods_run_as_the_images_user_not_root():
    dockerfile = (REPO / "deploy" / "docker" / "Dockerfile").read_text(encoding="utf-8")
    security = POD["securityContext"]
    assert security["runAsNonRoot"] and security["runAsUser"] != 0
    assert f"USER {security['runAsUser']}:{security['runAsGroup']}" in dockerfile
    assert CONTAINER["securityContext"]["allowPrivilegeEscalation"] is False


def _kubectl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL, *args], capture_output=True, text=True, timeout=KUBECTL_SECONDS)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on the PATH")
def test_kubectl_renders_the_kustomization_and_an_overlay_like_the_docs(tmp_path):
    rendered = _kubectl("kustomize", str(MANIFESTS))
    assert rendered.returncode == 0, rendered.stderr
    resources = [r for r in yaml.safe_load_all(rendered.stdout) if r]
    assert sorted(r["kind"] for r in resources) == ["Service", "StatefulSet"]
    for resource in resources:
        _validate(resource, VERSIONS[-1])

    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(MANIFESTS, overlay)],  # kustomize wants it relative
                "namespace": "analytics",
                "images": [
                    {
                        "name": CONTAINER["image"].split(":")[0],
                        "newName": "registry.example.com/datafusion-distributed-worker",
                        "newTag": "0.1.0",
                    }
                ],
            }
        )
    )
    rendered = _kubectl("kustomize", str(overlay))
    assert rendered.returncode == 0, rendered.stderr
    resources = {r["kind"]: r for r in yaml.safe_load_all(rendered.stdout) if r}
    assert {r["metadata"]["namespace"] for r in resources.values()} == {"analytics"}
    (container,) = resources["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/datafusion-distributed-worker:0.1.0"


def _api_server_answers() -> bool:
    return KUBECTL is not None and _kubectl("version", "--request-timeout=5s").returncode == 0


@pytest.mark.parametrize("name", sorted(RESOURCES))
def test_kubectl_client_dry_run_accepts_each_manifest(name):
    if not _api_server_answers():
        pytest.skip("no Kubernetes API server answers kubectl (its client dry run needs one for discovery)")
    applied = _kubectl("apply", "--dry-run=client", "--validate=false", "-f", str(MANIFESTS / name))
    assert applied.returncode == 0, applied.stderr
