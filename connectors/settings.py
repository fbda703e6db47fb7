"""The field types several connector families' settings share, each declared once.

A family's ``<Family>Settings`` (``connectors/<family>/settings.py``) names its fields
with these types, so a shared setting has one range, one description (the CLI's help
text) and one set of CLI specifics (``extra``), however many families use it; only the
default is the family's (each process its own metrics port).

``extra`` keys the CLI generator reads (:mod:`gputriage.cli.options`): ``required``
(no default, but click must not enforce it: the ``[connect.<x>]`` table may supply
it), ``envvar``, ``metavar``, ``path`` (keyword arguments of ``click.Path``) and
``option`` (the singular spelling of a repeatable field). Nothing here imports more
than msgspec: every command loads the settings.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

Cluster = Annotated[
    str | None,
    msgspec.Meta(description="Cluster name to put on every event.", extra={"required": True}),
]
Node = Annotated[
    str | None,
    msgspec.Meta(
        description="This node's name ($NODE_NAME).",
        extra={"required": True, "envvar": "NODE_NAME"},
    ),
]
Brokers = Annotated[
    str | None,
    msgspec.Meta(
        description="Kafka bootstrap servers (default: kafka.brokers from the settings).",
        extra={"metavar": "HOST:PORT[,...]"},
    ),
]
HeartbeatSeconds = Annotated[
    float,
    msgspec.Meta(
        gt=0,
        le=30,
        description="Seconds between heartbeats while the source has nothing new.",
    ),
]
"""At most 30 s: a quiet source must never age out of the processor's watermark."""
Once = Annotated[bool, msgspec.Meta(description="Publish what the source holds now, then exit.")]
PrintOnly = Annotated[
    bool,
    msgspec.Meta(
        description="Print the records as JSON lines instead of publishing them (no Kafka needed)."
    ),
]
Kubeconfig = Annotated[
    str | None,
    msgspec.Meta(
        description="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).",
        extra={"metavar": "FILE", "path": {"exists": True, "dir_okay": False}},
    ),
]
KubeContext = Annotated[
    str | None, msgspec.Meta(description="Kubeconfig context (default: the current one).")
]
InCluster = Annotated[bool, msgspec.Meta(description="Use the pod's service account.")]
BufferSize = Annotated[int, msgspec.Meta(ge=1, le=10_000_000)]
"""Its description is the family's: what is held (events, lines) differs."""
SilenceTimeoutSeconds = Annotated[float, msgspec.Meta(ge=1.0, le=86400)]
"""Its description is the family's: what is reconnected differs."""
MIG_PREFIXES: Final = ("nvidia.com/mig-",)
"""Resource name prefixes of MIG devices (the mixed strategy: ``nvidia.com/mig-1g.10gb``)."""
GpuResources = Annotated[
    tuple[str, ...],
    msgspec.Meta(
        description="Extended resource counted as a GPU.",
        extra={"option": "--resource", "metavar": "NAME"},
    ),
]
"""Its default is the family's: the kubelet lists time-sliced replicas under their own name."""
GpuResourcePrefixes = Annotated[
    tuple[str, ...],
    msgspec.Meta(
        description="Resource name prefix counted as a GPU.",
        extra={"option": "--resource-prefix", "metavar": "PREFIX"},
    ),
]

GPU_DRIVERS: Final = ("gpu.nvidia.com",)
"""The DRA drivers whose devices are GPUs unless told otherwise (NVIDIA's DRA driver)."""
GPU_DEVICE_CLASSES: Final = ("gpu.nvidia.com", "mig.nvidia.com")
"""The DRA device classes whose devices are GPUs unless told otherwise: NVIDIA's driver
installs one class for whole GPUs and one for MIG devices."""
GpuDrivers = Annotated[
    tuple[str, ...],
    msgspec.Meta(
        description="DRA driver whose devices are GPUs (ResourceSlices, claim allocations).",
        extra={"option": "--gpu-driver", "metavar": "DRIVER"},
    ),
]
GpuDeviceClasses = Annotated[
    tuple[str, ...],
    msgspec.Meta(
        description="DRA device class whose requests ask for GPUs (ResourceClaims, templates).",
        extra={"option": "--gpu-device-class", "metavar": "CLASS"},
    ),
]


def required(value: str | None, name: str) -> str:
    """A field the CLI requires (``cluster``, ``node``, ``url``), for code that takes the settings
    from elsewhere: a ``ValueError`` naming it when it is unset."""
    if not value:
        raise ValueError(f"the settings name no {name}")
    return value


def check_kube_access(in_cluster: bool, kubeconfig: str | None, context: str | None) -> None:
    """The pod's service account, or a kubeconfig (and a context of it): never both."""
    if in_cluster and (kubeconfig or context):
        raise ValueError("in_cluster: does not go with --kubeconfig/--context")
