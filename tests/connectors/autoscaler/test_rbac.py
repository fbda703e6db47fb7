"""deploy/base/connect-autoscaler.yaml grants what the connector uses, and nothing more.

The "uses" side is measured: the log follower and the status watcher run against kmock
(pods listed and read, a log followed, a reconnect, the ConfigMap listed and watched)
and every request kmock recorded becomes an (apiGroup, resource, verb) triple.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from connectors.autoscaler.run import AutoscalerLogSource
from connectors.autoscaler.settings import AutoscalerSettings
from connectors.autoscaler.status_watch import StatusWatcher
from tests.connectors.autoscaler.log_server import log_server, stamp
from tests.connectors.autoscaler.test_follow import collecting, fast_follower, setting
from tests.connectors.autoscaler.test_status_watch import TEXT, configmap
from tests.connectors.k8s.test_rbac import verb
from tests.kafka_helpers import eventually
from tests.paths import DEPLOY

RBAC = DEPLOY / "base" / "connect-autoscaler.yaml"
Triple = tuple[str, str, str]


def load() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc]


def granted() -> dict[Triple, str]:
    grants: dict[Triple, str] = {}
    for doc in load():
        assert doc["kind"] != "ClusterRole", "nothing cluster-wide"
        if doc["kind"] != "Role":
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for v in rule["verbs"]:
                        grants[(group, resource, v)] = doc["metadata"]["namespace"]
    return grants


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_the_connector_needs_nothing_the_rbac_does_not_grant() -> None:
    async with log_server() as (server, api):
        server.add("ca-1")
        server.write("ca-1", stamp(0), setting(1))
        server.configmaps.put(configmap("10", TEXT))
        status = StatusWatcher(api, AutoscalerSettings(cluster="c1"))
        source = AutoscalerLogSource(fast_follower(api), status=status)
        async with collecting(source) as got:
            await eventually(lambda: len(got.events) == 2, what="a line and a status fact")
            server.drop()
            server.write("ca-1", stamp(1), setting(2))
            await eventually(lambda: len(got.events) == 3, what="the reconnect")
            await eventually(lambda: len(server.configmaps.watch_requests) == 1, what="watch")
        assert server.server is not None
        requests = list(server.server)
    used: dict[Triple, set[str | None]] = {}
    for request in requests:
        assert request.resource is not None, f"non-resource request {request.url}"
        plural = str(request.resource.plural)
        if request.subresource:
            plural = f"{plural}/{request.subresource}"
        used.setdefault((str(request.resource.group), plural, verb(request)), set()).add(
            request.namespace
        )
    grants = granted()
    assert set(used) == {
        ("", "pods", "list"),
        ("", "pods", "get"),
        ("", "pods/log", "get"),
        ("", "configmaps", "list"),
        ("", "configmaps", "watch"),
    }
    missing = set(used) - set(grants)
    assert not missing, f"the connector uses what the manifest does not grant: {sorted(missing)}"
    assert all(namespaces == {"kube-system"} for namespaces in used.values())
    assert set(grants) == set(used), "nothing granted beyond what the connector does"
    # resourceNames limits list/watch only for requests that select that one name.
    [named] = [
        rule["resourceNames"]
        for doc in load()
        if doc["kind"] == "Role"
        for rule in doc["rules"]
        if "resourceNames" in rule
    ]
    configmap_requests = [
        r for r in requests if r.resource is not None and str(r.resource.plural) == "configmaps"
    ]
    assert configmap_requests
    for request in configmap_requests:
        assert request.params.get("fieldSelector") == f"metadata.name={named[0]}", request.url
    assert set(grants.values()) == {"kube-system"}
    (binding,) = [doc for doc in load() if doc["kind"] == "RoleBinding"]
    (subject,) = binding["subjects"]
    assert (subject["name"], subject["namespace"]) == ("gputriage-connect-autoscaler", "gputriage")
