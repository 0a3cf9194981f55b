"""infra/k8s/: every manifest validates offline against the Kubernetes schemas (strict: no
unknown fields), and the pieces agree with the platform (ports, probes, secrets, the per-table
run limit, settings the pods get)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import ValidationError

from lake_platform.settings import DagsterSettings, LakeSettings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "infra" / "k8s"
KUBERNETES = "1.37.0"
HELM_VALUES = K8S / "dagster-values.yaml"


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path == HELM_VALUES:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


def find(kind: str, name: str) -> dict[str, Any]:
    return next(doc for _, doc in manifests() if doc["kind"] == kind and doc["metadata"]["name"] == name)


@pytest.mark.parametrize("label,doc", manifests(), ids=[label for label, _ in manifests()])
def test_manifest_validates_against_the_kubernetes_schema(label: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_validator_rejects_a_broken_manifest() -> None:
    broken = yaml.safe_load(yaml.safe_dump(find("Deployment", "lake-flight")))
    broken["spec"]["replicas"] = "three"
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)
    unknown = yaml.safe_load(yaml.safe_dump(find("Service", "lake-flight")))
    unknown["spec"]["portz"] = []
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(unknown, KUBERNETES, strict=True)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_flight_replicas_probe_grpc_health_share_keys_and_drain() -> None:
    deployment = find("Deployment", "lake-flight")
    flight = container(deployment)
    port = next(p["containerPort"] for p in flight["ports"] if p["name"] == "flight")
    assert flight["args"][:1] == ["serve-flight"] and str(port) in flight["args"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert flight[probe]["grpc"]["port"] == port
    keys = next(e for e in flight["env"] if e["name"] == "LAKE_FLIGHT_KEYS")
    assert keys["valueFrom"]["secretKeyRef"]["name"] == "lake-flight-keys"
    # The drain (10 s for running streams, then shutdown) fits in the grace period.
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
    pdb = find("PodDisruptionBudget", "lake-flight")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    service = find("Service", "lake-flight")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "flight"


def test_rest_catalog_serves_on_2333() -> None:
    rest = container(find("Deployment", "lake-rest"))
    assert rest["args"][0] == "serve-rest" and "2333" in rest["args"]
    assert find("Service", "lake-rest")["spec"]["ports"][0]["port"] == 2333
    # A non-loopback bind needs TLS or the explicit plaintext opt-in (lake serve-rest refuses otherwise).
    env = {e["name"]: e.get("value") for e in rest["env"]}
    assert env.get("LAKE_REST_ALLOW_INSECURE") == "true" or "LAKE_REST_TLS_CERT_FILE" in env


@pytest.mark.parametrize("name", ["lake-flight", "lake-rest"])
def test_metrics_are_served_on_the_declared_port(name: str) -> None:
    spec = container(find("Deployment", name))
    env = {e["name"]: e.get("value") for e in spec["env"]}
    port = next(p["containerPort"] for p in spec["ports"] if p["name"] == "metrics")
    assert env["LAKE_METRICS_PORT"] == str(port) and env["LAKE_METRICS_HOST"] == "0.0.0.0"


def test_the_shared_settings_are_valid_platform_settings() -> None:
    data = find("ConfigMap", "lake-config")["data"]
    lake = {k.removeprefix("LAKE_").lower(): v for k, v in data.items() if not k.startswith("LAKE_DAGSTER_")}
    LakeSettings(_env_file=None, **lake)  # type: ignore[arg-type]
    dagster = {
        k.removeprefix("LAKE_DAGSTER_").lower(): v for k, v in data.items() if k.startswith("LAKE_DAGSTER_")
    }
    settings = DagsterSettings(_env_file=None, **dagster)  # type: ignore[arg-type]
    assert settings.executor == "k8s_job" and settings.step_io.startswith("s3://")


def test_helm_values_launch_runs_on_k8s_from_our_image_with_the_per_table_limit() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", "lake_platform.defs.definitions"]
    assert {"name": "lake-config"} in deployment["envConfigMaps"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is False and values["postgresql"]["postgresqlHost"]
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "QueuedRunCoordinator"
    ours = yaml.safe_load((REPO / "dagster.yaml").read_text())["concurrency"]["runs"][
        "tag_concurrency_limits"
    ]
    assert coordinator["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"] == ours
    dequeue = yaml.safe_load((REPO / "dagster.yaml").read_text())["run_coordinator"]["config"]
    assert (
        coordinator["config"]["queuedRunCoordinator"]["dequeueUseThreads"] is dequeue["dequeue_use_threads"]
    )
    assert (
        coordinator["config"]["queuedRunCoordinator"]["dequeueNumWorkers"] == dequeue["dequeue_num_workers"]
    )
    assert values["telemetry"] == {"enabled": False}


@pytest.mark.parametrize("name", ["lake-flight", "lake-rest"])
def test_the_query_audit_goes_to_the_log_stream_not_the_pods_scratch_disk(name: str) -> None:
    """Unset, LAKE_AUDIT_LOG is <LAKE_HOME>/audit/queries.jsonl, here on the pod's emptyDir: every
    replica's trail was lost with its pod, and grew on the node's disk (no size limit) until the
    kubelet evicted the pod. docs/deploy.md says to send it to the log stream (``-``)."""
    from lake_platform.observability.audit import audit_target

    data = dict(find("ConfigMap", "lake-config")["data"])
    data.update({e["name"]: e["value"] for e in container(find("Deployment", name))["env"] if "value" in e})
    lake = {k.removeprefix("LAKE_").lower(): v for k, v in data.items()}
    settings = LakeSettings(
        _env_file=None, **{k: v for k, v in lake.items() if k in LakeSettings.model_fields}
    )
    assert audit_target(settings) == "-"
