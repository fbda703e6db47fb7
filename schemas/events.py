"""Event records: what connectors publish on the raw topics.

Every event is a frozen, keyword-only ``msgspec.Struct`` tagged by its schema name and
version (``"pod.v1"``...): the tag is the only type information on the wire, never a
class path. ``id`` is deterministic at the source (incident ids derive from evidence ids,
so random ids break replay); ``time`` is event time as the source observed it; ``node``
(with ``scope``) decides the correlation key (:mod:`schemas.keys`).

Traps: new fields get defaults so old records still decode, and a breaking change gets a
new tag beside the old one; ids are identity only (a version is its own field,
``resource_version``); names, ids and integers are bounded (:mod:`schemas.types`), and a
record past a bound is refused as it decodes, yet every real source's record still fits.
docs/detection.md, design notes: event records.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from schemas.types import (
    MAX_LABEL_LENGTH,
    MAX_NAME_LENGTH,
    MAX_NODE_PODS,
    Id,
    Int32,
    Label,
    Name,
    Op,
    ResourceVersion,
    Scope,
    Time,
    XidCode,
)

ClaimRef = Annotated[str, msgspec.Meta(max_length=MAX_LABEL_LENGTH + 1 + MAX_NAME_LENGTH)]
"""A namespaced object named ``namespace/name``: a label, a slash, a name."""


class PodRef(msgspec.Struct, frozen=True, kw_only=True):
    """A pod (and optionally one of its containers) named by namespace and name."""

    namespace: Label
    name: Name
    container: Label = ""


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """The object a Kubernetes Event is about (its ``involvedObject``/``regarding``)."""

    kind: str
    name: Name
    namespace: Label = ""
    uid: str = ""
    container: Label = ""
    """For a Pod: the container the event is about, from the reference's ``fieldPath``
    (``spec.containers{name}``, also ``initContainers``/``ephemeralContainers``); empty
    when the event is about the whole object."""


class Termination(msgspec.Struct, frozen=True, kw_only=True):
    """A container termination, from ``state.terminated`` or ``lastState.terminated``.

    ``message`` is the termination message; with ``terminationMessagePolicy:
    FallbackToLogsOnError`` it holds the last log lines, which is how the core can
    see ``CUDA out of memory`` without any log source.
    """

    reason: str = ""
    exit_code: Int32 = 0
    finished_at: Time | None = None
    message: str = ""


class DeviceHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One device the kubelet allocated to a container, with its health, from the
    container status's ``allocatedResourcesStatus`` (device-plugin resources and DRA
    claims alike).

    Trap: ``Unknown`` is the normal value where the plugin or DRA driver reports no
    health to the kubelet (NVIDIA's DRA driver does not): it says nothing is wrong.
    """

    resource: str
    """The resource as the kubelet names it: ``nvidia.com/gpu``, or ``claim:<pod claim
    name>/<request>`` for a DRA claim."""
    device: str = ""
    """The kubelet's resource id: a device-plugin id (a GPU uuid) or, for DRA,
    ``<CDI vendor/class>=<claim uid>-<device>``."""
    health: str = ""
    """``Healthy``, ``Unhealthy`` or ``Unknown``."""


class ContainerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The slimmed status of one container."""

    name: Label
    restart_count: Int32 = 0
    state: str = ""
    """``waiting``, ``running`` or ``terminated`` (empty when unknown)."""
    reason: str = ""
    """Reason of the current state, e.g. ``CrashLoopBackOff``."""
    terminated: Termination | None = None
    last_terminated: Termination | None = None
    devices: tuple[DeviceHealth, ...] = ()
    """Its GPU devices and their health (``allocatedResourcesStatus``), GPU resources and
    GPU claims only; empty where the kubelet reports none (before Kubernetes 1.31, or the
    ``ResourceHealthStatus`` feature gate off)."""


class GpuShare(msgspec.Struct, frozen=True, kw_only=True):
    """Part of a GPU, as a fractional-GPU scheduler's pod annotations ask for it.

    Run:ai and the KAI Scheduler read ``gpu-fraction`` (a share of one GPU's
    memory, ``"0.5"``) or ``gpu-memory`` (MiB, ``"2000"``), and
    ``gpu-fraction-num-devices`` (how many GPUs get that share).
    """

    fraction: float = 0.0
    """Share of each GPU (``gpu-fraction``); 0 when the pod asked by memory."""
    memory_mib: Int32 = 0
    """GPU memory on each GPU in MiB (``gpu-memory``); 0 when the pod asked by fraction."""
    devices: Int32 = 1
    """How many GPUs the share applies to (``gpu-fraction-num-devices``, 1 when absent)."""


class PodClaim(msgspec.Struct, frozen=True, kw_only=True):
    """One of a pod's DRA claims (``spec.resourceClaims`` with its status).

    ``gpus`` is the connector's join: the GPU devices the claim asks for, read from the
    ResourceClaim (or, before it exists, its ResourceClaimTemplate) whose requests name a
    GPU device class. It makes a pod that holds GPUs only through claims a GPU pod.
    """

    name: Label
    """The pod's name for the claim (``spec.resourceClaims[].name``)."""
    claim: Name = ""
    """The ResourceClaim object (``status.resourceClaimStatuses`` or
    ``resourceClaimName``); empty until the claim controller has made it."""
    template: Name = ""
    """The ResourceClaimTemplate it is made from, if any."""
    gpus: Int32 = 0
    """GPU devices the claim asks for (0: not a GPU claim, or not known yet)."""
    device_class: Name = ""
    """The GPU device class of its first GPU request (``gpu.nvidia.com``)."""


class PodCondition(msgspec.Struct, frozen=True, kw_only=True):
    """The ``PodScheduled`` condition, which carries ``Unschedulable`` messages, or the
    ``DisruptionTarget`` condition, which says who is deleting the pod and why."""

    status: str
    reason: str = ""
    message: str = ""


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="schema"):
    """Fields every event carries. Never instantiated itself."""

    id: Id
    cluster: Name
    time: Time


class PodEvent(Event, tag="pod.v1", frozen=True, kw_only=True):
    """A pod as the watch saw it, slimmed to what correlation needs."""

    node: Name = ""
    op: Op = "modified"
    namespace: Label
    name: Name
    uid: str = ""
    phase: str = ""
    reason: str = ""
    """Pod-level reason: ``Evicted``, ``UnexpectedAdmissionError``, ``NodeLost``..."""
    message: str = ""
    gpu_requests: dict[str, Int32] = {}
    """Extended GPU resources requested, summed over containers (MIG included)."""
    gpu_limits: dict[str, Int32] = {}
    owner_kind: str = ""
    owner_name: Name = ""
    containers: tuple[ContainerStatus, ...] = ()
    scheduled: PodCondition | None = None
    created_at: Time | None = None
    deleted_at: Time | None = None
    gpu_share: GpuShare | None = None
    """Set when the pod asked for *part* of a GPU through a fractional-GPU scheduler:
    it runs on a GPU other pods share, and is a GPU pod though it requests no GPU
    resource (``gpu_requests`` stays empty). Sharing a node declares for all its
    GPUs (time-slicing, MPS) is its ``nvidia.com/gpu.sharing-strategy`` label."""
    scope: Scope = "node"
    """``"cluster"`` on the copy :class:`schemas.keys.Router` sends to the cluster key
    (same id, time and fields as the original), for the cluster-scoped rules.
    Records written before this field decode as ``"node"``."""
    resource_version: ResourceVersion = 0
    """The object's resourceVersion as a number (etcd's revision: larger is later), the
    one its id ``k8s:<uid>:<resourceVersion>`` names; 0 when unknown (a version that is
    not a decimal number, a record of a release before this field). The core orders
    copies of the pod by it, and reads the id only when it is 0
    (:func:`schemas.ids.k8s_version`)."""
    claims: tuple[PodClaim, ...] = ()
    """Its DRA claims (Kubernetes 1.34+ ``resource.k8s.io/v1``); a pod holds GPUs by
    claim when one has ``gpus``."""
    disruption: PodCondition | None = None
    """The ``DisruptionTarget`` condition when set: ``DeletionByTaintManager``,
    ``DeletionByDeviceTaintManager``, ``EvictionByEvictionAPI``,
    ``PreemptionByScheduler``, ``TerminationByKubelet``..."""
    monitor: Label = ""
    """The GPU monitoring component this pod is (:data:`schemas.wellknown.MONITOR_ROLES`:
    ``dcgm-exporter``, ``device-plugin``, ``dra-plugin``, ``node-agent``); empty for a
    workload. A monitoring pod holds no GPU, yet is published so that the core sees its
    crash loops and liveness kills (``monitoring_gap``); it is never a GPU pod."""


class NodeCondition(msgspec.Struct, frozen=True, kw_only=True):
    """One node condition (``Ready``, ``MemoryPressure``...)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


CORDON_TAINT: Final = "node.kubernetes.io/unschedulable"
"""The taint of a cordoned node (``spec.unschedulable``, mirrored by the node lifecycle
controller): the k8s connector writes it, the planned-disruption rule reads it."""


class Taint(msgspec.Struct, frozen=True, kw_only=True):
    """One node taint."""

    key: str
    value: str = ""
    effect: str = ""


class NodeEvent(Event, tag="node.v1", frozen=True, kw_only=True):
    """A node as the watch saw it: GPU capacity, allocatable, conditions, labels.

    ``capacity`` and ``allocatable`` hold GPU resources only. A drop of
    allocatable below capacity is how the device plugin says a GPU is unhealthy.
    ``labels`` holds the GPU-relevant labels only (product, count, memory, machine,
    presence, MIG capability, config and strategy, sharing strategy, replicas,
    instance type, zone).
    """

    node: Name
    op: Op = "modified"
    capacity: dict[str, Int32] = {}
    allocatable: dict[str, Int32] = {}
    conditions: tuple[NodeCondition, ...] = ()
    labels: dict[str, Label] = {}
    taints: tuple[Taint, ...] = ()
    scope: Scope = "node"
    """``"cluster"`` on the copy :class:`schemas.keys.Router` sends to the cluster key
    (same id, time and fields as the original), for the cluster-scoped rules.
    Records written before this field decode as ``"node"``."""
    resource_version: ResourceVersion = 0
    """The node object's resourceVersion as a number, as on :class:`PodEvent`; 0 when
    unknown."""


class KubeEvent(Event, tag="k8s_event.v1", frozen=True, kw_only=True):
    """A core/v1 or events.k8s.io Event (``Evicted``, ``OOMKilling``...).

    ``node`` is the node the event concerns: the involved node itself, or the
    node of the involved pod, or the reporting host. Empty for cluster-scoped
    events such as autoscaler decisions on a pending pod.
    """

    node: Name = ""
    reason: str
    message: str = ""
    type: str = "Normal"
    involved: ObjectRef
    source: str = ""
    count: Int32 = 1


class XidEvent(Event, tag="xid.v1", frozen=True, kw_only=True):
    """One NVIDIA XID (or NVSwitch SXid) occurrence on one GPU.

    ``pci_bus_id`` is canonical (see :func:`schemas.pci.canonical_bus_id`).
    ``gpu_uuid`` is filled when any source on the node knows the bus id mapping.
    """

    node: Name
    code: XidCode
    pci_bus_id: str = ""
    gpu_uuid: str = ""
    gpu_index: Int32 | None = None
    pid: Int32 | None = None
    process: str = ""
    message: str = ""
    source: str = "kmsg"
    sxid: bool = False
    recovery_action: str = ""
    """For XID 154: the recovery action the driver now asks for."""
    caused_by: XidCode | None = None
    """For XID 45: the earlier XID this cleanup follows."""
    gpu_instance: Int32 | None = None
    """The MIG GPU instance the XID is attributed to, on the *parent* GPU that
    ``pci_bus_id`` / ``gpu_uuid`` name: the kernel's ``GPU-I:05`` (``Xid
    (PCI:0000:01:00 GPU-I:05): 94, ...``) is 5, NVML's event ``gpuInstanceId``
    likewise. It is the id dcgm-exporter labels ``GPU_I_ID`` and
    :attr:`GpuBindingEvent.gpu_instance` carries, so (parent GPU, instance) names
    one MIG instance in every source.

    Traps: ``None`` does not mean "not a MIG GPU": most XIDs on a MIG GPU are
    device-level (79, 48, 154...) and name no instance, and the driver names one
    only when it can attribute the fault; such an XID concerns every instance of
    the GPU. ``gpu_uuid`` is never a ``MIG-`` uuid; dcgm-exporter's XID gauge is
    device-level, so its XIDs never set this."""
    compute_instance: Int32 | None = None
    """The MIG compute instance within :attr:`gpu_instance` (kernel ``GPU-CI:00``, NVML
    ``computeInstanceId``), when the driver attributes the fault that finely; ``None``
    otherwise. Only meaningful together with ``gpu_instance``. Kubernetes MIG devices
    (the device plugin's ``nvidia.com/mig-*`` resources) are whole GPU instances with one
    compute instance each, so bindings and joins use ``gpu_instance`` alone."""
    scope: Scope = "node"
    """``"cluster"`` on the copy :class:`schemas.keys.Router` sends to the cluster key of an
    NVLink fabric XID (144-149), for the one-incident-per-NVLink-domain rule. Records
    written before this field decode as ``"node"``."""


class GpuBindingEvent(Event, tag="gpu_binding.v1", frozen=True, kw_only=True):
    """Which pods hold one GPU (or MIG instance) now. An empty ``pods`` unbinds it.

    Under time-slicing or MPS all the pods sharing a GPU are listed. A source that knows a
    GPU but not its pods (NVML) sets ``pods_known`` false: ``pods`` is then ignored, so it can
    never unbind what a pod-aware source bound. A MIG instance is named alike by every source:
    the parent GPU's ``gpu_uuid``/``pci_bus_id``/``gpu_index`` plus ``gpu_instance`` (the key an
    XID's ``GPU-I:NN`` carries), ``mig_uuid`` and ``mig_profile`` when known.

    Trap: records written before these fields spelled a MIG instance in ``gpu_uuid``
    (``<parent>/GI<id>``, ``MIG-...``): they still decode, with ``gpu_instance`` ``None``.
    docs/detection.md, design notes: `GpuBindingEvent`.
    """

    node: Name
    gpu_uuid: str
    """The GPU's uuid; for a MIG instance the parent's (``GPU-...``, never ``MIG-...``)."""
    pci_bus_id: str = ""
    """Canonical; for a MIG instance the parent's, which all its instances share."""
    gpu_index: Int32 | None = None
    """NVML index; for a MIG instance the parent's."""
    device: str = ""
    mig_profile: str = ""
    """The MIG profile (``1g.10gb``) of a MIG instance; empty for a whole GPU."""
    pods: Annotated[tuple[PodRef, ...], msgspec.Meta(max_length=MAX_NODE_PODS)] = ()
    """The pods holding it: at most :data:`~schemas.types.MAX_NODE_PODS`, as on any node."""
    pods_known: bool = True
    gpu_instance: Int32 | None = None
    """The MIG GPU instance id (dcgm-exporter ``GPU_I_ID``, NVML
    ``nvmlDeviceGetGpuInstanceId``) of the instance this binding is about; ``None``
    for a whole GPU. Trap: several bindings share one ``gpu_uuid`` / ``pci_bus_id``
    when they differ here; a consumer that keys GPUs by bus id or uuid alone merges
    the instances, and the last binding wins. Instance ids are per parent GPU (every
    GPU of a node may have an instance 1), and are reused when instances are
    destroyed and created again with other profiles."""
    mig_uuid: str = ""
    """NVML's uuid of the MIG device (``MIG-5e0b...``; what ``nvidia-smi -L`` lists and
    ``NVIDIA_VISIBLE_DEVICES`` may name), when the source knows it (NVML does;
    dcgm-exporter does not export it). Identity only: join on (parent, ``gpu_instance``).
    Trap: a MIG device is a *compute* instance; a GPU instance split into several
    compute instances has several ``MIG-`` uuids, hence several NVML bindings with
    one ``gpu_instance`` (Kubernetes' MIG strategies make one compute instance per
    GPU instance, so there it is one)."""
    scope: Scope = "node"
    """``"cluster"`` on the copy :class:`schemas.keys.Router` sends to the cluster key
    (same id, time and fields as the original), for the cluster-scoped rules.
    Records written before this field decode as ``"node"``."""
    shared: bool = False
    """The GPU is shared by design: the device plugin hands out time-sliced replicas
    of it (kubelet device ids ``<uuid>::<n>``), so several pods in ``pods`` are
    expected, and a fault on it concerns every one of them. Records written before
    this field decode as ``False`` (a source that did not know says nothing)."""
    source: str = ""
    """Which source bound it: ``dcgm-exporter``, ``nvml``, ``pod-resources`` (the
    kubelet's own record of which pod holds which device: the ground truth) or ``dra``
    (the API server's: allocated ResourceClaims reserved for pods, joined with the
    ResourceSlice that names the device's uuid and bus). Empty on records written
    before this field. Trap: ``allocation_mismatch`` compares the Kubernetes requests
    with what *DCGM* reports, so kubelet and DRA bindings must not count as DCGM's."""
    claims: tuple[ClaimRef, ...] = ()
    """For ``dra``: the ResourceClaims (``namespace/name``) through which ``pods`` hold
    it. ``device`` is then the DRA device name (``gpu-2``)."""


class GpuPairLink(msgspec.Struct, frozen=True, kw_only=True):
    """How two GPUs of one node are connected: one cell of ``nvidia-smi topo -m``.

    Named after the reference's ``gpu_pair_link_type`` metric. ``src_gpu`` /
    ``dst_gpu`` are NVML indices (the ``GPU<n>`` of the matrix, which nvidia-smi orders
    by PCI bus id like NVML, whatever ``CUDA_DEVICE_ORDER`` says).
    """

    src_gpu: Int32
    dst_gpu: Int32
    link_type: str
    """The matrix code as printed: ``NV18`` (18 bonded NVLinks), ``PIX``, ``PXB``,
    ``PHB``, ``NODE``, ``SYS`` (older drivers also print ``SOC`` for ``SYS``)."""
    nvlinks: Int32 = 0
    """Bonded NVLinks between the two (the ``18`` of ``NV18``); 0 over PCIe."""


class GpuNumaAffinity(msgspec.Struct, frozen=True, kw_only=True):
    """Where one GPU sits: the reference's ``gpu_numa_affinity`` plus its identity."""

    gpu: Int32
    """NVML index (the ``GPU<n>`` row of the matrix)."""
    numa_node: Int32 | None = None
    """``None`` where the matrix prints ``N/A`` (one NUMA node, or a VM without it)."""
    cpu_affinity: str = ""
    """The CPU list as printed (``0-47``, ``0-23,48-71``)."""
    gpu_uuid: str = ""
    """Filled where the source knows it (NVML; ``nvidia-smi topo`` does not print it)."""
    pci_bus_id: str = ""
    """Canonical (see :func:`schemas.pci.canonical_bus_id`), where known."""


class GpuTopologyEvent(Event, tag="gpu_topology.v1", frozen=True, kw_only=True):
    """A node's whole GPU topology: every GPU pair's link and every GPU's NUMA node.

    A snapshot, not a delta: each record replaces what was known of the node, so a
    link that failed (NV18 becoming SYS after a reboot) cannot linger. Emitted at start
    and on change only (topology changes with reboots and link failures), never per
    scrape. ``links`` holds each unordered pair once (``src_gpu < dst_gpu``).
    """

    node: Name
    gpus: tuple[GpuNumaAffinity, ...] = ()
    links: tuple[GpuPairLink, ...] = ()
    source: str = "nvidia-smi"
    """``nvidia-smi`` (a parsed ``topo -m`` / ``-mp``) or ``nvml``."""


class AutoscalerEvent(Event, tag="autoscaler.v1", frozen=True, kw_only=True):
    """A cluster-autoscaler or Karpenter scale decision or failure (cluster-scoped).

    Parsed from the autoscaler's own log lines (``connectors/autoscaler``): one fact
    per record, ``node`` always empty (the correlation key is the cluster), the
    original line kept in ``line`` as evidence. Fields added after the first release
    all have defaults, so records written before them still decode.
    """

    action: str
    """One of a fixed vocabulary: ``unschedulable`` (pods the autoscaler cannot place
    yet), ``scale_up_planned`` (best option, estimate, final plan, setting group size,
    TriggeredScaleUp/ScaledUpGroup, a created nodeclaim), ``scale_up_failed`` (the
    cloud refused or failed to create nodes), ``scale_up_timeout`` (nodes did not
    register in time), ``backoff`` (the group is skipped until ``until``),
    ``max_size_reached`` (a node group's max size, the cluster's total limits, a
    NodePool's limits), ``scale_down`` (nodes being removed, or failing to be),
    ``unhealthy`` (the status ConfigMap calls the node group unhealthy).
    Records of releases before this vocabulary may carry other words."""
    node_group: str = ""
    """The node group (ASG, MIG URL, VMSS, Karpenter NodePool) the fact is about."""
    reason: str = ""
    """Why, in a fixed vocabulary: ``quota`` (a cloud quota: QUOTA_EXCEEDED,
    VcpuLimitExceeded, Azure "exceeding quota limit"), ``capacity`` (the cloud has no
    machines: zone resource pool exhausted, stockout, InsufficientInstanceCapacity,
    placeholder-cannot-be-fulfilled, provisioning-state-failed), ``max_size`` (the
    group's max size or the autoscaler's own limits, including cluster-autoscaler's
    "resource quotas"), ``timeout``, ``backoff`` (in backoff and the line gives no
    cause), ``config`` (no node group fits: predicates, affinity, taints, a missing
    node class), ``other`` (a failure of any other kind); empty when the fact has no
    cause (a plan, a scale-down)."""
    message: str = ""
    pods: tuple[PodRef, ...] = ()
    source: str = "cluster-autoscaler"
    """``cluster-autoscaler`` or ``karpenter``."""
    size_from: Int32 | None = None
    """The group's size before a planned scale-up, when the line says it."""
    size_to: Int32 | None = None
    """The size asked for, when the line says it."""
    max_size: Int32 | None = None
    """The group's (or the cluster's) maximum, when the line says it."""
    until: Time | None = None
    """For ``backoff``: when scale-up of the group is allowed again, when given."""
    cloud: str = ""
    """``aws``, ``gce`` or ``azure`` when the line shows which; empty otherwise."""
    cloud_code: str = ""
    """The error code as logged (``QUOTA_EXCEEDED``, ``placeholder-cannot-be-fulfilled``,
    ``InsufficientInstanceCapacity``, ``OperationNotAllowed``, ``timeout``...)."""
    error_class: str = ""
    """cluster-autoscaler's error class (``OutOfResource``, ``Other``) when logged."""
    line: str = ""
    """The original line, wrappers included: the evidence."""


MAX_SLICE_DEVICES: Final = 128
"""``resource.k8s.io/v1`` allows at most 128 devices in one ResourceSlice."""


class DeviceTaint(msgspec.Struct, frozen=True, kw_only=True):
    """A DRA device taint: from the slice itself (the driver's) or a DeviceTaintRule."""

    key: str
    value: str = ""
    effect: str = ""
    """``NoSchedule`` (no new claims get it) or ``NoExecute`` (pods holding it are
    evicted by the device taint eviction controller)."""
    time_added: Time | None = None
    rule: Name = ""
    """The DeviceTaintRule it comes from; empty when the slice itself carries it."""


class SliceDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One device of a ResourceSlice, slimmed to its identity and taints.

    Trap: NVIDIA's driver names full GPUs ``gpu-<minor>`` and MIG devices
    ``gpu-<minor>-mig-<profile>-<placement>``; a MIG device's ``uuid`` is the ``MIG-``
    one and ``parent_uuid`` the GPU's, and it publishes no GPU-instance id.
    """

    name: Label
    uuid: str = ""
    """The ``uuid`` attribute (``GPU-...`` or ``MIG-...``)."""
    pci_bus_id: str = ""
    """Canonical (:func:`schemas.pci.canonical_bus_id`), from the standard
    ``resource.kubernetes.io/pciBusID`` attribute (older drivers: ``pcieBusID``)."""
    product: str = ""
    """The ``productName`` attribute."""
    type: str = ""
    """The ``type`` attribute: ``gpu``, ``mig``, ``vfio``..."""
    parent_uuid: str = ""
    """For a MIG device: the ``parentUUID`` attribute."""
    mig_profile: str = ""
    """For a MIG device: the ``profile`` attribute (``1g.12gb``)."""
    taints: tuple[DeviceTaint, ...] = ()


class ResourceSliceEvent(Event, tag="resource_slice.v1", frozen=True, kw_only=True):
    """A ResourceSlice (``resource.k8s.io``): one driver's devices in one pool.

    The cluster-wide GPU inventory and the uuid <-> bus map, with no node agent. A
    snapshot of the slice: ``taints`` include those of the DeviceTaintRules that select a
    device (the connector applies them), so a rule added or removed re-emits the slice.
    Traps: a pool may span several slices (``slice_count``); a slice of an older pool
    ``generation`` is stale and is superseded by the newer ones.
    """

    node: Name = ""
    """``spec.nodeName``: empty for slices of network-attached devices."""
    op: Op = "modified"
    name: Name
    driver: Name
    pool: Name
    generation: ResourceVersion = 0
    """The pool's generation."""
    slice_count: Int32 = 1
    """``pool.resourceSliceCount``: the pool is complete once this many slices of its
    generation are seen."""
    devices: Annotated[tuple[SliceDevice, ...], msgspec.Meta(max_length=MAX_SLICE_DEVICES)] = ()
    resource_version: ResourceVersion = 0
    scope: Scope = "node"


class ClaimRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request of a claim: which device class, and how many."""

    name: Label
    device_class: Name = ""
    count: Int32 = 1
    """``ExactCount``'s count; 0 for ``allocationMode: All``."""


class ClaimDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One allocated device (``status.allocation.devices.results``)."""

    request: str
    """The request it satisfies (``gpu``, or ``<request>/<subrequest>``)."""
    driver: Name
    pool: Name
    device: Label


class ClaimDeviceStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The driver's own word on one allocated device (``status.devices``)."""

    driver: Name
    pool: Name
    device: Label
    conditions: tuple[NodeCondition, ...] = ()


class ResourceClaimEvent(Event, tag="resource_claim.v1", frozen=True, kw_only=True):
    """A ResourceClaim: what it asks for, what it was given, and for which pods."""

    node: Name = ""
    """The node its allocation is bound to (the ``metadata.name`` of its
    ``nodeSelector``); empty while it is not allocated."""
    op: Op = "modified"
    namespace: Label
    name: Name
    uid: str = ""
    requests: tuple[ClaimRequest, ...] = ()
    devices: tuple[ClaimDevice, ...] = ()
    reserved_for: Annotated[tuple[PodRef, ...], msgspec.Meta(max_length=MAX_NODE_PODS)] = ()
    """``status.reservedFor``, pods only."""
    device_status: tuple[ClaimDeviceStatus, ...] = ()
    gpus: Int32 = 0
    """Devices its requests ask of GPU device classes (as on :class:`PodClaim`)."""
    resource_version: ResourceVersion = 0
    scope: Scope = "node"


class Tick(Event, tag="tick.v1", frozen=True, kw_only=True):
    """A clock reading: lets the watermark advance on keys that have gone quiet.

    A node agent's heartbeat also says the agent is alive: ``node`` and ``source`` set,
    the core records when it last heard each monitoring source of the node
    (``monitoring_gap``). Trap: ``time`` is the source's *progress*, which a live source
    advances even while its input fails (a dcgm-exporter scrape that is refused is an
    idle batch, "caught up"); ``read_at`` is when it last read its input successfully.
    """

    node: Name = ""
    source: Label = ""
    """The monitoring source family (:data:`schemas.wellknown.SOURCE_FAMILIES`: ``kmsg``,
    ``journal``, ``dcgm``, ``nvml``, ``pod-resources``); empty on a tick that vouches only
    for progress (every tick written before this field)."""
    read_at: Time | None = None
    """When the source last read its input successfully (a dcgm-exporter scrape that
    answered, an NVML poll); None: as ``time`` (a kernel-log reader blocked on a quiet
    node is reading)."""


EVENT_TYPES: tuple[type[Event], ...] = (
    PodEvent,
    NodeEvent,
    KubeEvent,
    XidEvent,
    GpuBindingEvent,
    GpuTopologyEvent,
    AutoscalerEvent,
    ResourceSliceEvent,
    ResourceClaimEvent,
    Tick,
)
