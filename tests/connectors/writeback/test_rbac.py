"""The write-back's RBAC (deploy/components/writeback) grants what it uses, and no more.

Measured, not listed by hand: a session of each kind (Events only; Events and marks)
runs against kmock with leader election, and every request kmock recorded becomes an
(apiGroup, resource, verb) triple, as the API server's authorizer sees it.
"""

from __future__ import annotations

import pytest
import yaml

from connectors.k8s.leader import LeaseElector, LeaseOptions
from connectors.writeback.runner import Writeback, build
from connectors.writeback.settings import WritebackSettings
from tests.connectors.k8s.test_rbac import Triple, granted, verb
from tests.connectors.writeback.cluster import Cluster, cluster, gpu_node
from tests.connectors.writeback.incidents import eviction, resolved
from tests.paths import DEPLOY

COMPONENT = DEPLOY / "components" / "writeback"


def roles(*paths: str) -> tuple[set[Triple], dict[Triple, str]]:
    docs = [d for p in paths for d in yaml.safe_load_all((COMPONENT / p).read_text()) if d]
    return granted(docs)


def used(c: Cluster) -> set[Triple]:
    triples = set()
    for request in c.server:
        resource = request.resource
        if resource is None:
            continue
        plural = (resource.plural or "") + (
            f"/{request.subresource}" if request.subresource else ""
        )
        triples.add((resource.group or "", plural, verb(request)))
    return triples


async def session(c: Cluster, settings: WritebackSettings) -> None:
    """Leader election, an open incident, a restart's convergence, an update, the resolve."""
    c.add_pod("ml", "train-0")
    c.add_pod("ml", "train-1")
    c.add_node(gpu_node("gpu-1"))
    lease = LeaseOptions(namespace="gputriage", name=settings.lease_name, identity="r1")
    incident = eviction()

    async def work() -> None:
        first: Writeback = build(settings, c.api, identity="r1")
        await first.handle(incident)
        second = build(settings, c.api, identity="r1")
        second.latest = {incident.id: incident}
        await second.converge()
        await second.handle(eviction(revision=2))
        await second.handle(resolved(eviction(revision=2)))

    await LeaseElector(c.api, lease).run(work)


@pytest.mark.parametrize(
    ("settings", "files"),
    [
        (WritebackSettings(metrics_port=None), ("writeback.yaml",)),
        (
            WritebackSettings(metrics_port=None, mark_nodes=True),
            ("writeback.yaml", "marking/marking.yaml"),
        ),
    ],
    ids=["events", "marking"],
)
@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_the_writeback_needs_what_its_rbac_grants_and_no_more(
    settings: WritebackSettings, files: tuple[str, ...]
) -> None:
    cluster_wide, namespaced = roles(*files)
    async with cluster() as c:
        await session(c, settings)
        triples = used(c)
    leases = {t for t in triples if t[1] == "leases"}
    assert leases <= set(namespaced)
    assert set(namespaced.values()) == {"gputriage"}
    assert triples - leases == cluster_wide, "each grant used, each request granted"


def test_events_only_never_writes_a_node() -> None:
    cluster_wide, _ = roles("writeback.yaml")
    writes = {t for t in cluster_wide if t[2] not in ("get", "list", "watch")}
    assert {resource for _, resource, _ in writes} == {"events"}
