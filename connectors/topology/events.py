"""A :class:`Topology` as the ``gpu_topology.v1`` record: one whole-node snapshot.

The id hashes the snapshot itself (cluster, node, source, every pair and GPU), not the
time: the same topology read again (a restart, the same file) repeats the same id, and
a changed one (a link down) gets another. The core sees duplicates only where time *and*
id agree, so a topology that changes back (A, B, A) is still applied each time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from connectors.topology.matrix import Topology
from schemas.events import GpuTopologyEvent
from schemas.ids import hashed_id

ID_PREFIX: Final = "topo"


def topology_event(
    topology: Topology, *, cluster: str, node: str, time: datetime, source: str
) -> GpuTopologyEvent:
    """The record of ``topology`` (``source``: ``nvidia-smi`` or ``nvml``)."""
    links = ";".join(f"{x.src_gpu}-{x.dst_gpu}:{x.link_type}:{x.nvlinks}" for x in topology.links)
    gpus = ";".join(
        f"{g.gpu}:{g.numa_node}:{g.cpu_affinity}:{g.gpu_uuid}:{g.pci_bus_id}" for g in topology.gpus
    )
    return GpuTopologyEvent(
        id=hashed_id(ID_PREFIX, cluster, node, source, links, gpus),
        cluster=cluster,
        time=time,
        node=node,
        gpus=topology.gpus,
        links=topology.links,
        source=source,
    )
