"""Typed, versioned records: the contract between connectors, the core and sinks.

Everything that crosses a process boundary (a Kafka topic, a recorded file, a
bridge payload) is one of the ``msgspec.Struct`` types defined here, encoded by
:mod:`schemas.codec`. Nothing else encodes or decodes records.
"""

from schemas.events import (
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
from schemas.incidents import Evidence, GpuRef, Incident, PodInfo

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
