"""Every overlay, rendered by the real kustomize, is valid Kubernetes and safe by default.

What a platform team's admission policy (Pod Security ``restricted``, Kyverno/Gatekeeper
baselines) would check, checked here first, on the objects ``kubectl apply -k`` sends:
schemas (kubernetes-validate, strict, a current Kubernetes), no privilege, least RBAC,
resources and probes on every container, secrets only by reference, pinned images.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.rendered import (
    BUILT_IN_SKIPPED,
    OVERLAYS,
    containers,
    name_of,
    pod_specs,
    render,
)
from tests.paths import DEPLOY, ROOT

KUBERNETES: str = kubernetes_validate.latest_version()
"""The newest Kubernetes whose schemas kubernetes-validate ships (1.37 with 1.37.0)."""
CLUSTER_SCOPED = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "CustomResourceDefinition"}
)
READ_VERBS = frozenset({"get", "list", "watch"})
LEASE_VERBS = frozenset({"get", "create", "patch", "update"})
ALLOWED_ROOT = {
    ("gputriage-node", "gputriage-node-agents", "connect-kmsg"),
    ("gputriage-node", "gputriage-node-agents", "connect-podresources"),
}
"""Containers allowed to run as uid 0, each with its reason beside it in the manifest
(base/node-agents.yaml: the journal files' owner, the kubelet socket's owner; every
capability dropped)."""
NVML_CONTAINERS = {"connect-kmsg", "connect-podresources", "connect-topo"}
"""The containers that open NVML: the only ones that may ask the NVIDIA runtime for the
driver (NVIDIA_VISIBLE_DEVICES)."""


def _version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


@pytest.fixture(params=OVERLAYS)
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(request.param)


def test_every_overlay_renders_and_every_built_in_object_validates(
    docs: list[dict[str, Any]],
) -> None:
    assert len(docs) >= 20
    for doc in docs:
        if doc["kind"] in BUILT_IN_SKIPPED:
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name_of(doc)} is not valid Kubernetes {KUBERNETES}: {exc.message}")


def test_custom_resources_have_their_required_shape(docs: list[dict[str, Any]]) -> None:
    """No schema ships for them: the fields the Prometheus Operator needs, by hand."""
    for doc in docs:
        if doc["kind"] == "PodMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]["selector"]["matchLabels"]
            assert all(e["port"] for e in doc["spec"]["podMetricsEndpoints"])
        elif doc["kind"] == "PrometheusRule":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert all(g["rules"] for g in doc["spec"]["groups"])


def test_every_namespaced_object_names_its_namespace_and_each_namespace_its_pod_security(
    docs: list[dict[str, Any]],
) -> None:
    namespaces = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}
    assert set(namespaces) == {"gputriage", "gputriage-node"}
    assert namespaces["gputriage"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "restricted"
    )
    node_labels = namespaces["gputriage-node"]["metadata"]["labels"]
    assert node_labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert node_labels["pod-security.kubernetes.io/audit"] == "restricted"
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace"), f"{name_of(doc)} has no namespace"
    # Only the node agents may live in the namespace that is not `restricted`.
    for doc, _spec in pod_specs(docs):
        if doc["metadata"]["namespace"] == "gputriage-node":
            assert doc["metadata"]["name"] == "gputriage-node-agents"


def test_no_container_is_privileged_or_can_gain_privilege(docs: list[dict[str, Any]]) -> None:
    for doc, spec, container in containers(docs):
        where = f"{name_of(doc)}:{container['name']}"
        security = container.get("securityContext", {})
        pod_security = spec.get("securityContext", {})
        assert not security.get("privileged", False), f"{where} is privileged"
        assert security.get("allowPrivilegeEscalation") is False, where
        assert security.get("readOnlyRootFilesystem") is True, where
        capabilities = security.get("capabilities", {})
        assert capabilities.get("drop") == ["ALL"], where
        assert not capabilities.get("add"), f"{where} adds capabilities"
        seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile")
        assert seccomp == {"type": "RuntimeDefault"}, where
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(field, False), f"{where}: {field}"
        key = (doc["metadata"]["namespace"], doc["metadata"]["name"], container["name"])
        non_root = security.get("runAsNonRoot", pod_security.get("runAsNonRoot"))
        uid = security.get("runAsUser", pod_security.get("runAsUser"))
        if key in ALLOWED_ROOT:
            assert uid == 0, f"{where} is listed as root but is not"
        else:
            assert non_root is True, f"{where} may run as root"
            assert uid != 0, f"{where} runs as uid 0"
        assert spec.get("priorityClassName") not in (
            "system-node-critical",
            "system-cluster-critical",
        )


def test_host_paths_are_read_only_except_the_cursor(docs: list[dict[str, Any]]) -> None:
    for doc, spec in pod_specs(docs):
        host_volumes = {
            v["name"]: v["hostPath"] for v in spec.get("volumes", []) if "hostPath" in v
        }
        if not host_volumes:
            continue
        assert doc["metadata"]["namespace"] == "gputriage-node", name_of(doc)
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in host_volumes:
                    continue
                path = host_volumes[mount["name"]]["path"]
                if path == "/var/lib/gputriage":  # the reader's cursor: must be written
                    continue
                assert mount.get("readOnly") is True, f"{name_of(doc)}: {path} is writable"
        assert "/dev/kmsg" not in {v["path"] for v in host_volumes.values()}, (
            "a char device through hostPath cannot be opened unprivileged (node-agents.yaml)"
        )


def test_every_container_has_resources_and_probes_on_its_health_endpoints(
    docs: list[dict[str, Any]],
) -> None:
    for doc, _spec, container in containers(docs):
        where = f"{name_of(doc)}:{container['name']}"
        resources = container.get("resources", {})
        for side in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(side, {})), f"{where}: {side}"
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        for probe in ("livenessProbe", "readinessProbe"):
            spec = container.get(probe)
            assert spec, f"{where} has no {probe}"
            if "httpGet" in spec:
                assert spec["httpGet"]["port"] in ports, f"{where}: {probe} on an unknown port"
                wanted = "/readyz" if probe == "readinessProbe" else "/healthz"
                assert spec["httpGet"]["path"] == wanted, f"{where}: {probe}"
                # The loop check waits up to 5 s (connectors/health.py): the probe must too.
                assert spec.get("timeoutSeconds", 1) > 5, f"{where}: {probe} times out first"
            else:
                assert doc["metadata"]["name"] == "gputriage-kafka", f"{where}: {probe}"


def test_rbac_is_read_only_with_no_wildcards(docs: list[dict[str, Any]]) -> None:
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            where = f"{name_of(role)} {rule}"
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(field, []), f"wildcard {field}: {where}"
            verbs = set(rule["verbs"])
            resources = set(rule["resources"])
            if role["kind"] == "ClusterRole":
                assert verbs <= READ_VERBS, where
            elif resources == {"leases"}:
                assert verbs <= LEASE_VERBS, where
                assert rule.get("resourceNames") or verbs == {"create"}, (
                    f"a Lease rule not limited by name: {where}"
                )
            elif resources == {"pods/log"}:
                assert verbs == {"get"}, where
            else:
                assert verbs <= READ_VERBS, where


def test_secrets_are_referenced_never_inlined(docs: list[dict[str, Any]]) -> None:
    assert not [name_of(d) for d in docs if d["kind"] == "Secret"], "a Secret in the manifests"
    secretish = re.compile(r"(TOKEN|PASSWORD|SECRET|ROUTING_KEY|API_KEY|WEBHOOK)", re.I)
    referenced = 0
    for doc, spec, container in containers(docs):
        for env in container.get("env", []):
            if secretish.search(env["name"]):
                assert "valueFrom" in env, f"{name_of(doc)}: {env['name']} inlined"
            if "secretKeyRef" in env.get("valueFrom", {}):
                referenced += 1
        referenced += sum("secret" in v for v in spec.get("volumes", []))
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for key, value in doc.get("data", {}).items():
                assert not secretish.search(key), f"{name_of(doc)}: {key} in a ConfigMap"
                assert "routing_key =" not in value, name_of(doc)
                assert "token =" not in value, name_of(doc)
    names = {d["metadata"]["name"] for d in docs}
    if "gputriage-bridge-pagerduty" in names:
        assert referenced >= 2, "the bridges read their keys from mounted Secrets"


def test_mounted_secrets_are_readable_by_the_non_root_user(docs: list[dict[str, Any]]) -> None:
    """The kubelet writes a Secret volume's files as root: a non-root container reads
    them through fsGroup and a group-readable mode (kubernetes/kubernetes#57923), or the
    bridge stops at start with "unreadable file"."""
    for doc, spec in pod_specs(docs):
        secrets = [v for v in spec.get("volumes", []) if "secret" in v]
        if not secrets:
            continue
        pod = spec.get("securityContext", {})
        assert pod.get("fsGroup"), f"{name_of(doc)} mounts a Secret without fsGroup"
        assert pod.get("runAsUser") not in (None, 0), f"{name_of(doc)}: no explicit uid"
        for volume in secrets:
            mode = volume["secret"].get("defaultMode", 0o644)
            assert mode & 0o040, f"{name_of(doc)}: {volume['name']} not group-readable"
            assert not mode & 0o007, f"{name_of(doc)}: {volume['name']} readable by others"


def test_images_are_pinned_to_this_release(docs: list[dict[str, Any]]) -> None:
    version = _version()
    for doc, _spec, container in containers(docs):
        image = container["image"]
        assert ":" in image.rsplit("/", 1)[-1], f"{name_of(doc)}: {image} has no tag"
        assert not image.endswith(":latest"), f"{name_of(doc)}: {image}"
        if "gputriage/gputriage" in image:
            assert image.endswith(f":{version}"), f"{image} is not pyproject's {version}"


def test_nvml_is_requested_only_where_it_is_used(docs: list[dict[str, Any]]) -> None:
    seen = set()
    for _doc, _spec, container in containers(docs):
        names = {e["name"] for e in container.get("env", [])}
        if "NVIDIA_VISIBLE_DEVICES" in names:
            seen.add(container["name"])
    assert seen == NVML_CONTAINERS


def test_every_pod_has_a_network_policy_beyond_the_default_deny(
    docs: list[dict[str, Any]],
) -> None:
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    denies = {p["metadata"]["namespace"] for p in policies if p["spec"]["podSelector"] == {}}
    assert denies == {"gputriage", "gputriage-node"}
    for doc, spec in pod_specs(docs):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        namespace = doc["metadata"]["namespace"]
        own = [
            p
            for p in policies
            if p["metadata"]["namespace"] == namespace
            and p["spec"]["podSelector"].get("matchLabels")
            and p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]
        assert own, f"{name_of(doc)} has only the default deny"
        ports = {p["name"] for c in spec["containers"] for p in c.get("ports", [])}
        ingress_ports = {
            port["port"]
            for p in own
            for rule in p["spec"].get("ingress", [])
            for port in rule["ports"]
        }
        assert ingress_ports <= ports | {9092}, f"{name_of(doc)} opens ports it does not serve"


def test_disruption_budgets_cover_the_replicated_deployments(docs: list[dict[str, Any]]) -> None:
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["spec"].get("replicas", 1) > 1:
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert any(
                b["spec"]["selector"]["matchLabels"].items() <= labels.items() for b in budgets
            ), f"{name_of(doc)} has replicas and no PodDisruptionBudget"


def test_the_node_agents_run_on_gpu_nodes_only() -> None:
    [agents] = [d for d in render("production") if d["kind"] == "DaemonSet"]
    spec = agents["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec.get("automountServiceAccountToken") is False
    # The reasons stand beside the choices an admission policy would question.
    text = (DEPLOY / "base" / "node-agents.yaml").read_text(encoding="utf-8")
    for reason in ("Why the journal, not /dev/kmsg", "Why uid 0", "not system-node-critical"):
        assert reason in text
