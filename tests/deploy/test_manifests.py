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
WRITEBACK_WRITES = {
    ("gputriage-writeback", "events.k8s.io", "events"): {
        "create",
        "get",
        "list",
        "patch",
        "delete",
    },
    ("gputriage-writeback-marking", "", "nodes/status"): {"patch"},
}
"""The only writes granted cluster-wide: the write-back's Events (and, opt-in, its node
condition); tests/connectors/writeback/test_rbac.py checks them against its requests."""
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
HOST_PATHS = {
    "/var/log/journal": True,
    "/var/lib/kubelet/pod-resources": True,
    "/var/lib/gputriage": False,
}
"""Every host path a pod may mount, and whether it must be read-only: the journal (not
the rest of /var/log, not /etc/machine-id), the kubelet's pod-resources socket directory,
and the journal cursor's directory."""
CURSOR = "/var/lib/gputriage"
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
"""What Pod Security `baseline` lets a container add (its "Capabilities" control)."""


def _image_user() -> tuple[int, int]:
    """The Dockerfile's final ``USER uid:gid``, as numbers."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    users = re.findall(r"^USER\s+(\d+):(\d+)\s*$", text, re.M)
    assert users, "the Dockerfile's USER must be numeric uid:gid"
    uid, gid = users[-1]
    return int(uid), int(gid)


def baseline_violations(spec: dict[str, Any]) -> set[str]:
    """What of a pod spec Pod Security `baseline` forbids
    (https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline)."""
    found = set()
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.add(field)
    if any("hostPath" in v for v in spec.get("volumes", [])):
        found.add("hostPath")
    if spec.get("securityContext", {}).get("sysctls"):
        found.add("sysctls")
    for security in [spec.get("securityContext", {})] + [
        c.get("securityContext", {}) for c in [*spec.get("initContainers", []), *spec["containers"]]
    ]:
        if security.get("privileged"):
            found.add("privileged")
        if security.get("windowsOptions", {}).get("hostProcess"):
            found.add("hostProcess")
        if set(security.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES:
            found.add("capabilities")
        if security.get("seccompProfile", {}).get("type") == "Unconfined":
            found.add("seccomp")
        if security.get("appArmorProfile", {}).get("type") == "Unconfined":
            found.add("appArmor")
        if security.get("procMount", "Default") != "Default":
            found.add("procMount")
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        if any(p.get("hostPort") for p in container.get("ports", [])):
            found.add("hostPort")
    return found


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
    # Only the agents that need the host live in the namespace that is not `restricted`,
    # and nothing they run is beyond `baseline` but their host paths: `privileged` is the
    # narrowest level that admits them, not a licence for more.
    for doc, spec in pod_specs(docs):
        beyond = baseline_violations(spec)
        if doc["metadata"]["namespace"] == "gputriage-node":
            assert doc["metadata"]["name"] == "gputriage-node-agents"
            assert beyond == {"hostPath"}, f"{name_of(doc)} is beyond baseline: {beyond}"
        else:
            assert not beyond, f"{name_of(doc)} is beyond baseline: {beyond}"


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
        gid = security.get("runAsGroup", pod_security.get("runAsGroup"))
        # runAsNonRoot alone lets the kubelet accept whatever the image says, and refuse a
        # non-numeric USER only at start: the ids are written out, as numbers.
        assert isinstance(uid, int), f"{where}: no numeric runAsUser"
        assert isinstance(gid, int), f"{where}: no numeric runAsGroup"
        if key in ALLOWED_ROOT:
            assert (uid, gid) == (0, 0), f"{where} is listed as root but is not"
            assert non_root is False, where
        else:
            assert non_root is True, f"{where} may run as root"
            assert uid != 0, f"{where} runs as uid 0"
            if container["image"].startswith("ghcr.io/gputriage/"):
                assert (uid, gid) == _image_user(), f"{where}: not the image's USER"
        assert spec.get("priorityClassName") not in (
            "system-node-critical",
            "system-cluster-critical",
        )


def test_host_paths_are_named_read_only_but_the_cursor_and_never_created(
    request: pytest.FixtureRequest, docs: list[dict[str, Any]]
) -> None:
    mounted = set()
    for doc, spec in pod_specs(docs):
        host_volumes = {
            v["name"]: v["hostPath"] for v in spec.get("volumes", []) if "hostPath" in v
        }
        if not host_volumes:
            continue
        assert doc["metadata"]["namespace"] == "gputriage-node", name_of(doc)
        for volume in host_volumes.values():
            path = volume["path"]
            assert path in HOST_PATHS, f"{name_of(doc)} mounts {path} of the host"
            mounted.add(path)
            # A pod never creates host directories (hostPath DirectoryOrCreate makes a 0755
            # root directory wherever the spec says); only the dev overlay, for a trial node
            # with no provisioning step, lets the kubelet create the cursor's.
            created = "DirectoryOrCreate" if request.node.callspec.id == "dev" else "Directory"
            wanted = created if path == CURSOR else "Directory"
            assert volume.get("type") == wanted, f"{name_of(doc)}: {path} is {volume.get('type')}"
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in host_volumes:
                    continue
                path = host_volumes[mount["name"]]["path"]
                if HOST_PATHS[path]:
                    assert mount.get("readOnly") is True, f"{name_of(doc)}: {path} is writable"
    assert mounted == set(HOST_PATHS)


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
            writes = WRITEBACK_WRITES.get(
                (role["metadata"]["name"], *rule["apiGroups"], *rule["resources"])
            )
            if role["kind"] == "ClusterRole" and writes is not None:
                assert verbs <= writes, where
            elif role["kind"] == "ClusterRole":
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
                if key.endswith("_FILE"):  # where a mounted Secret's file is, not the secret
                    assert value.startswith("/"), f"{name_of(doc)}: {key}={value}"
                    continue
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
        uids = {
            c.get("securityContext", {}).get("runAsUser", pod.get("runAsUser"))
            for c in spec["containers"]
        }
        if uids == {0}:
            continue  # root reads the root-owned files as their owner
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
            tag = image.split("@", 1)[0]
            assert tag.endswith(f":{version}"), f"{image} is not pyproject's {version}"


def test_gpus_are_visible_only_where_nvml_is_used_and_only_its_capability(
    docs: list[dict[str, Any]],
) -> None:
    """The NVIDIA runtime injects GPUs for NVIDIA_VISIBLE_DEVICES, and the driver's pieces
    for NVIDIA_DRIVER_CAPABILITIES; `void` turns both off, whatever an image or the node's
    default runtime would set (base/node-agents.yaml)."""
    seen = set()
    for doc, _spec, container in containers(docs):
        where = f"{name_of(doc)}:{container['name']}"
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if env.get("NVIDIA_VISIBLE_DEVICES") == "void":
            assert "NVIDIA_DRIVER_CAPABILITIES" not in env, where
            continue
        seen.add(container["name"])
        assert env.get("NVIDIA_VISIBLE_DEVICES") == "all", where
        # NVML and nvidia-smi only: no compute (CUDA), video, graphics or display libraries.
        assert env.get("NVIDIA_DRIVER_CAPABILITIES") == "utility", where
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
    daemonsets = [d for d in render("production") if d["kind"] == "DaemonSet"]
    assert {d["metadata"]["name"] for d in daemonsets} == {
        "gputriage-node-agents",
        "gputriage-gpu-agents",
    }
    for agents in daemonsets:
        spec = agents["spec"]["template"]["spec"]
        affinity = spec["affinity"]["nodeAffinity"]
        terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
        assert "nvidia.com/gpu.present" in keys
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        assert spec.get("automountServiceAccountToken") is False
    # The reasons stand beside the choices an admission policy would question.
    text = (DEPLOY / "base" / "node-agents.yaml").read_text(encoding="utf-8")
    for reason in (
        "Why the journal, not /dev/kmsg",
        "What of the journal is mounted",
        "Why uid 0",
        "The volume's type is Directory",
        "not system-node-critical",
    ):
        assert reason in text


def test_the_pod_monitor_scrapes_every_metrics_port() -> None:
    docs = render("production+bridges")
    [monitor] = [d for d in docs if d["kind"] == "PodMonitor"]
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    served = {
        port["name"]
        for _doc, _spec, container in containers(docs)
        if "gputriage/" in container["image"]
        for port in container.get("ports", [])
    }
    assert served
    assert served <= scraped, f"never scraped: {sorted(served - scraped)}"
    assert set(monitor["spec"]["namespaceSelector"]["matchNames"]) == {
        "gputriage",
        "gputriage-node",
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_writeback_acts_on_its_own_cluster_only(overlay: str) -> None:
    """Pod and node names repeat across clusters sharing an incident topic: the write-back's
    cluster is set, and is the cluster the connectors stamp."""
    docs = render(overlay)
    maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    for config in maps.values():
        if "GPUTRIAGE_CONNECT__K8S__CLUSTER" in config:
            assert (
                config.get("GPUTRIAGE_WRITEBACK__CLUSTER")
                == (config["GPUTRIAGE_CONNECT__K8S__CLUSTER"])
            )
    seen = 0
    for doc, spec in pod_specs(docs):
        for container in spec["containers"]:
            if "writeback" not in container.get("args", []):
                continue
            seen += 1
            env: dict[str, Any] = {}
            for source in container.get("envFrom", []):
                env.update(maps[source["configMapRef"]["name"]])
            env.update({e["name"]: e.get("value") for e in container.get("env", [])})
            assert env.get("GPUTRIAGE_WRITEBACK__CLUSTER"), name_of(doc)
    assert seen == (1 if overlay.startswith("production") else 0)
