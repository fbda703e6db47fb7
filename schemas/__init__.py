"""Typed, versioned records: the contract between connectors, the core and sinks.

Everything that crosses a process boundary (a Kafka topic, a recorded file, a
bridge payload) is one of the ``msgspec.Struct`` types defined here, encoded by
:mod:`schemas.codec`. Nothing else encodes or decodes records.

Importing this package first runs :func:`schemas.native.guard`: :mod:`schemas.keys` is
compiled with the core (mypyc), and a producer imports it without ``streams``, so the
check that a compiled module matches its source must run here, before any of them.
Where a build is present, that check reads and hashes the sources once per process
(~7 ms): the one thing importing the schemas does besides defining types.
"""

from schemas.native import guard

guard()

from schemas.events import (  # noqa: E402 - after the guard: it decides what imports
    AutoscalerEvent,
    ContainerStatus,
    Event,
    GpuBindingEvent,
    GpuNumaAffinity,
    GpuPairLink,
    GpuShare,
    GpuTopologyEvent,
    KubeEvent,
    NodeCondition,
    NodeEvent,
    ObjectRef,
    PodCondition,
    PodEvent,
    PodRef,
    Taint,
    Termination,
    Tick,
    XidEvent,
)
from schemas.incidents import Evidence, GpuRef, Incident, PodInfo  # noqa: E402

__all__ = [
    "AutoscalerEvent",
    "ContainerStatus",
    "Event",
    "Evidence",
    "GpuBindingEvent",
    "GpuNumaAffinity",
    "GpuPairLink",
    "GpuRef",
    "GpuShare",
    "GpuTopologyEvent",
    "Incident",
    "KubeEvent",
    "NodeCondition",
    "NodeEvent",
    "ObjectRef",
    "PodCondition",
    "PodEvent",
    "PodInfo",
    "PodRef",
    "Taint",
    "Termination",
    "Tick",
    "XidEvent",
]
