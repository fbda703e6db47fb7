"""The connector's RBAC (deploy/base/connect-k8s.yaml) grants what it uses, and no more.

The "uses" side is measured, not listed by hand: a full connector session
(list, watch, a relist after 410, leader election with a clean release) runs
against kmock, and every request kmock recorded becomes an (apiGroup, resource,
verb) triple, as the API server's authorizer would see it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.k8s.run import run_connect
from tests.k8s_helpers import (
    DRA_GROUP,
    DRA_SCRIPTED,
    FAST_WATCH,
    elected_options,
    fake_cluster,
    gone,
    kube_event,
    node,
    pod,
)
from tests.kafka_helpers import KafkaTestEnv, consume_events, eventually
from tests.paths import DEPLOY

RBAC = DEPLOY / "base" / "connect-k8s.yaml"
Triple = tuple[str, str, str]


def verb(request: Any) -> str:
    """The Kubernetes verb of an HTTP request (what RBAC checks)."""
    method = str(request.method.value if hasattr(request.method, "value") else request.method)
    method = method.upper()
    named = request.name is not None
    if method == "GET":
        if str(request.params.get("watch", "")).lower() in ("true", "1"):
            return "watch"
        return "get" if named else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[method]


def granted(documents: list[dict[str, Any]]) -> tuple[set[Triple], dict[Triple, str]]:
    """Triples of the ClusterRoles, and of the Roles with their namespace."""
    cluster: set[Triple] = set()
    namespaced: dict[Triple, str] = {}
    for doc in documents:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for v in rule["verbs"]:
                        if doc["kind"] == "ClusterRole":
                            cluster.add((group, resource, v))
                        else:
                            namespaced[(group, resource, v)] = doc["metadata"]["namespace"]
    return cluster, namespaced


def load() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc]


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_the_connector_needs_nothing_the_rbac_does_not_grant(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    async with fake_cluster(dra=True) as cluster:
        cluster.pods.put(pod("trainer", "10"))
        cluster.nodes.put(node("gpu-1", "5"))
        cluster.events.put(kube_event("ev1", "20", reason="Evicted", pod_name="trainer"))
        await kafka.acreate_topics()
        options = elected_options(tmp_path, cluster.url, retry_period_seconds=0.05)
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_connect(
                options.settings,
                kafka.kwargs,
                kafka.layout,
                lease=options.lease,
                watch=FAST_WATCH,
                stop=stop,
            )
        )
        await consume_events(kafka.bootstrap, list(kafka.layout.raw_topics), 3)
        cluster.pods.send(gone())  # exercise the relist path too
        await eventually(lambda: len(cluster.pods.list_requests) == 2, what="relist")
        dra = [cluster.resource(plural) for plural in DRA_SCRIPTED]
        await eventually(lambda: all(s.watch_requests for s in dra), what="the DRA watches")
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
        requests: list[Any] = cluster.requests()  # kmock types group/plural as optional
    used: set[Triple] = set()
    lease_namespaces: set[str | None] = set()
    for request in requests:
        assert request.resource is not None, f"non-resource request {request.url}"
        triple = (request.resource.group, request.resource.plural, verb(request))
        used.add(triple)
        if request.resource.plural == "leases":
            lease_namespaces.add(request.namespace)
    cluster_grants, role_grants = granted(load())
    # The session really exercised every path (or this test would prove little).
    assert {("", "pods", "list"), ("", "pods", "watch"), ("", "events", "watch")} <= used
    assert {(DRA_GROUP, r, v) for r in DRA_SCRIPTED for v in ("list", "watch")} <= used
    assert {("coordination.k8s.io", "leases", v) for v in ("get", "create")} <= used
    assert ("coordination.k8s.io", "leases", "patch") in used  # the release
    missing = used - cluster_grants - set(role_grants)
    assert not missing, f"the connector uses what the manifest does not grant: {sorted(missing)}"
    assert lease_namespaces == {"gputriage"} == set(role_grants.values())
    # Every request on a named Lease is on the one the Role's resourceNames allow.
    [role] = [doc for doc in load() if doc["kind"] == "Role"]
    named = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    lease_names = {r.name for r in requests if r.resource.plural == "leases" and r.name}
    assert lease_names == named == {"gputriage-connect-k8s"}


def test_the_rbac_grants_nothing_beyond_reading_and_its_lease() -> None:
    documents = load()
    cluster_grants, role_grants = granted(documents)
    read = (
        ("", "pods"),
        ("", "nodes"),
        ("", "events"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("resource.k8s.io", "devicetaintrules"),
    )
    assert cluster_grants == {
        (group, resource, v) for group, resource in read for v in ("get", "list", "watch")
    }
    assert set(role_grants) == {
        ("coordination.k8s.io", "leases", v) for v in ("get", "create", "patch")
    }
    rbac = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    kinds = sorted(doc["kind"] for doc in documents if doc["kind"] in rbac)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    for doc in documents:
        if doc["kind"].endswith("Binding"):
            (subject,) = doc["subjects"]
            assert (subject["kind"], subject["name"]) == ("ServiceAccount", "gputriage-connect-k8s")
