"""Watching the ``cluster-autoscaler-status`` ConfigMap against kmock (real client, HTTP):
the first version's facts, nothing for a resync, only the new facts of a change, a
dead letter for an unreadable status, a relist after 410 Gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import kmock
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from connectors.autoscaler.settings import AutoscalerSettings
from connectors.autoscaler.status_watch import StatusUpdate, StatusWatcher
from connectors.backoff import Backoff
from tests.k8s_helpers import ScriptedResource, collecting, gone
from tests.kafka_helpers import eventually
from tests.paths import DATA

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]

TEXT = (DATA / "autoscaler" / "ca_status_text.txt").read_text()
YAML = (DATA / "autoscaler" / "ca_status_yaml.yaml").read_text()


def configmap(rv: str, status: str) -> dict[str, Any]:
    return {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {
            "name": "cluster-autoscaler-status",
            "namespace": "kube-system",
            "uid": "uid-status",
            "resourceVersion": rv,
        },
        "data": {"status": status},
    }


@asynccontextmanager
async def configmaps() -> AsyncIterator[tuple[ScriptedResource, ApiClient]]:
    scripted = ScriptedResource("configmaps", "ConfigMap")
    async with kmock.KubernetesEmulator() as server, kmock.Server(server) as running:
        server[kmock.resource("", "v1", "configmaps")] << scripted.handle
        async with ApiClient(Configuration(host=str(running.url).rstrip("/"))) as api:
            yield scripted, api


def facts(items: list[StatusUpdate]) -> list[tuple[str, str, str]]:
    return [(e.node_group, e.action, e.reason) for u in items for e in u.events]


async def test_status_changes_publish_only_new_facts() -> None:
    async with configmaps() as (resource, api):
        resource.put(configmap("10", TEXT))
        resource.list_version = "10"
        watcher = StatusWatcher(
            api,
            AutoscalerSettings(cluster="c1"),
            backoff=Backoff(initial_seconds=0.01, max_seconds=0.05),
            clock=lambda: datetime(2026, 12, 1, tzinfo=UTC),
        )
        async with collecting(watcher.items()) as items:
            await eventually(lambda: len(resource.watch_requests) == 1, what="a watch")
            assert facts(items) == [("work-default-eks-spot1", "backoff", "backoff")]
            resource.event("MODIFIED", configmap("11", TEXT))  # a resync: same state
            resource.event("MODIFIED", configmap("12", "key: [unclosed"))
            await eventually(lambda: len(items) == 2, what="the dead letter")
            assert items[1].error is not None
            assert items[1].raw == b"key: [unclosed"
            resource.event("MODIFIED", configmap("13", YAML))
            await eventually(lambda: len(items) == 3, what="the YAML status")
            resource.list_version = "20"
            resource.send(gone())
            await eventually(lambda: len(resource.list_requests) == 2, what="a relist")
            await eventually(lambda: len(resource.watch_requests) == 2, what="the rewatch")
        assert facts(items) == [
            ("work-default-eks-spot1", "backoff", "backoff"),
            ("sample-node-group", "backoff", "quota"),
        ]
        assert resource.watch_requests[0]["resourceVersion"] == "10"
        assert resource.watch_requests[1]["resourceVersion"] == "20"  # the relist's
        assert (
            resource.list_requests[0]["fieldSelector"] == "metadata.name=cluster-autoscaler-status"
        )


async def test_the_settings_name_the_configmap_its_namespace_and_the_watch_timeout() -> None:
    """Namespace, ConfigMap and silence timeout come from the settings alone; the server
    is asked to end each watch at 80% of the silence timeout."""
    async with configmaps() as (resource, api):
        status = configmap("10", TEXT)
        status["metadata"].update(name="ca-status", namespace="ops")
        resource.put(status)
        resource.list_version = "10"
        settings = AutoscalerSettings(
            cluster="c1", namespace="ops", status_configmap="ca-status", silence_timeout_seconds=10
        )
        watcher = StatusWatcher(api, settings, backoff=Backoff(initial_seconds=0.01))
        async with collecting(watcher.items()) as items:
            await eventually(lambda: len(resource.watch_requests) == 1, what="a watch")
            assert facts(items) == [("work-default-eks-spot1", "backoff", "backoff")]
    listed, watched = resource.list_requests[0], resource.watch_requests[0]
    assert listed["fieldSelector"] == watched["fieldSelector"] == "metadata.name=ca-status"
    assert watched["timeoutSeconds"] == "8"
