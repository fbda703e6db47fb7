"""GPU monitoring pods are published with their role, and so are the kubelet's Events on them.

A crash-looping or liveness-killed dcgm-exporter leaves its node blind; it holds no GPU, so
the GPU filter dropped it and every Event about it. ``connect k8s`` (kmock and the real
kubernetes-asyncio client) and ``gputriage ingest k8s`` now keep the pods the labels of the
GPU operator, the standalone charts and our own node agents name (tests/data/monitors),
with ``PodEvent.monitor`` set, and keep the Events about them; a workload without a GPU
still is not published, crash-looping or not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from connectors.k8s.dra import DraJoin
from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.run import Connector
from connectors.k8s.settings import (
    MONITOR_ROLE_NAMES,
    MONITOR_SELECTORS,
    K8sSettings,
    parse_monitor_selectors,
)
from connectors.k8s.slim import SlimConfig, is_gpu_pod, slim_object
from connectors.k8s.watch import Emitted, Synced
from schemas.codec import decode_event
from schemas.events import GpuBindingEvent, KubeEvent, PodEvent, ResourceClaimEvent
from schemas.wellknown import MONITOR_ROLES
from tests import paths
from tests.cli_helpers import gputriage
from tests.connectors.k8s.test_dra_join import load, slim
from tests.k8s_helpers import FAST_WATCH, WATCHED, collecting, fake_cluster
from tests.kafka_helpers import eventually

DATA = paths.DATA / "monitors"
NODE = "ip-10-0-12-34.ec2.internal"
ROLES = {
    "nvidia-dcgm-exporter-7xw9p": "dcgm-exporter",
    "nvdp-nvidia-device-plugin-q8m2t": "device-plugin",
    "dra-driver-nvidia-gpu-kubelet-plugin-h7k4x": "dra-plugin",
    "gputriage-node-agents-5wz2c": "node-agent",
}
"""What tests/data/monitors/pods_gpu_monitors.json holds; the processor and the web pod are
no monitors."""
DCGM_EVENTS = {"Unhealthy", "Killing", "BackOff"}


def items(name: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads((DATA / name).read_text())["items"]
    return listed


def emitted(got: list[Any]) -> list[Any]:
    return [i.event for i in got if isinstance(i, Emitted)]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_the_connector_publishes_monitor_pods_and_their_liveness_kills() -> None:
    async with fake_cluster() as cluster:
        for obj in items("pods_gpu_monitors.json"):
            cluster.pods.put(obj)
        for obj in items("events_dcgm_exporter_liveness_killed_corev1.json"):
            cluster.events.put(obj)
        connector = Connector(cluster.api, WATCHED, watch=FAST_WATCH)
        watchers = connector.watchers
        async with collecting(watchers["pods"].items()) as pods:
            await eventually(lambda: any(isinstance(i, Synced) for i in pods), what="pods")
        async with collecting(watchers["events"].items()) as events:
            await eventually(lambda: any(isinstance(i, Synced) for i in events), what="Events")
    published = emitted(pods)
    assert all(isinstance(p, PodEvent) for p in published)
    assert {p.name: p.monitor for p in published} == ROLES
    exporter = next(p for p in published if p.monitor == "dcgm-exporter")
    assert exporter.node == NODE
    [container] = exporter.containers
    assert (container.restart_count, container.reason) == (71, "CrashLoopBackOff")
    assert container.last_terminated is not None
    assert container.last_terminated.exit_code == 137
    assert not any(is_gpu_pod(p) for p in published), "a monitor is never a GPU pod"
    kept = emitted(events)
    assert all(isinstance(e, KubeEvent) for e in kept)
    assert {(e.involved.name, e.reason, e.node) for e in kept} == {
        ("nvidia-dcgm-exporter-7xw9p", reason, NODE) for reason in DCGM_EVENTS
    }, "the exporter's Events on its node; the web pod's BackOff is no GPU matter"


def test_ingest_k8s_does_the_same_from_kubectl_output(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(
        (DATA / "pods_gpu_monitors.json").read_text()
        + (DATA / "events_dcgm_exporter_liveness_killed_corev1.json").read_text()
    )
    done = gputriage("ingest", "k8s", "--cluster", "c1", "--file", str(dump))
    assert done.returncode == 0, done.stderr
    printed = [decode_event(line) for line in done.stdout.splitlines()]
    pods = [e for e in printed if isinstance(e, PodEvent)]
    assert {p.name: p.monitor for p in pods} == ROLES
    events = [e for e in printed if isinstance(e, KubeEvent)]
    assert {(e.reason, e.node) for e in events} == {(r, NODE) for r in DCGM_EVENTS}


def test_a_controllers_event_about_a_monitor_pod_is_on_its_node() -> None:
    """An Event with no host (a controller's) is filed under the monitor pod's node."""
    gpu = GpuFilter()
    exporter = items("pods_gpu_monitors.json")[0]
    pod = slim_object(exporter, cluster="c1")
    assert isinstance(pod, PodEvent)
    assert gpu.keep(pod)
    [killing] = [
        o
        for o in items("events_dcgm_exporter_liveness_killed_corev1.json")
        if o["reason"] == "Killing"
    ]
    hostless = {**killing, "source": {"component": "taint-eviction-controller"}}
    hostless.pop("reportingInstance")
    event = slim_object(hostless, cluster="c1")
    assert isinstance(event, KubeEvent)
    assert event.node == ""
    assert gpu.keep(event)
    assert gpu.place(event).node == NODE


def test_the_selectors_are_settings_and_name_only_known_roles() -> None:
    assert MONITOR_ROLE_NAMES == MONITOR_ROLES
    assert {role for role, _ in parse_monitor_selectors(MONITOR_SELECTORS)} == set(MONITOR_ROLES)
    web = items("pods_gpu_monitors.json")[-1]
    mine = SlimConfig(monitors=parse_monitor_selectors(("node-agent:app=web",)))
    pod = slim_object(web, cluster="c1", config=mine)
    assert isinstance(pod, PodEvent)
    assert pod.monitor == "node-agent", "a selector of the user's own"
    for bad, says in (
        ("exporter:app=x", "does not start with a role"),
        ("dcgm-exporter:app", "is not KEY=VALUE"),
        ("dcgm-exporter:=x", "is not KEY=VALUE"),
    ):
        with pytest.raises(ValueError, match=says):
            msgspec.convert({"monitor_selectors": [bad]}, K8sSettings)


def admin_claim(admin: bool) -> dict[str, Any]:
    """The allocated claim of tests/data/dra, as the GPU operator's DRA dcgm-exporter asks it:
    administrative access (GPUOP ``manifests/state-dcgm-exporter/0400_resourceclaimtemplate.yaml``),
    reserved for the exporter's pod."""
    claim = load("resourceclaim_allocated")
    [request] = claim["spec"]["devices"]["requests"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    if admin:
        request["exactly"]["adminAccess"] = True
        result["adminAccess"] = True
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "nvidia-dcgm-exporter-dra-x"}]
    return claim


def test_an_admin_access_claim_holds_no_gpu() -> None:
    """A monitor's admin claim on every GPU must not bind the GPUs to the monitor: an XID
    there would name the exporter as an affected pod, and the cluster count it as a holder."""
    outcomes = {}
    for admin in (False, True):
        join = DraJoin(SlimConfig())
        join.on(slim(load("resourceslice_gpu_node")))
        claim = slim(admin_claim(admin))
        assert isinstance(claim, ResourceClaimEvent)
        bound = [r for r in join.on(claim) if isinstance(r, GpuBindingEvent)]
        outcomes[admin] = (claim.gpus, len(claim.devices), GpuFilter().keep(claim), len(bound))
    assert outcomes == {False: (1, 1, True, 1), True: (0, 0, False, 0)}
