"""The node's GPU topology from NVML, in the words of the ``nvidia-smi topo -m`` matrix.

Every call goes through the pynvml *module* passed in (tests hand it a fake of the
library); everything else is pure. Each cell is made as nvidia-smi makes it: the PCIe
common ancestor's level (``PIX``/``PXB``/``PHB``/``NODE``/``SYS``, else ``N/A``), or
``NV<n>`` for ``n`` active NVLinks, counted toward the peer GPU a link names or toward the
NVSwitch fabric (two GPUs on it are joined by the smaller switch-link count); plus CPU and
NUMA affinity.

Traps: a link NVML cannot query is not active; a remote that is neither a GPU of this
node nor a switch (a POWER9 NPU) joins no pair.
In full: docs/connectors.md, design notes: connectors/topology/nvml.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

from connectors.topology.matrix import Topology
from schemas.events import GpuNumaAffinity, GpuPairLink
from schemas.pci import canonical_bus_id

CPU_SET_WORDS: Final = 16
"""64-bit words of CPU mask asked for: 1,024 CPUs."""
NODE_SET_WORDS: Final = 1
"""64-bit words of NUMA node mask asked for: 64 nodes."""
NOT_AVAILABLE: Final = "N/A"


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def level_code(lib: Any, level: int) -> str:
    """The matrix code of an ``nvmlGpuTopologyLevel_t``."""
    codes = {
        lib.NVML_TOPOLOGY_INTERNAL: "PIX",
        lib.NVML_TOPOLOGY_SINGLE: "PIX",
        lib.NVML_TOPOLOGY_MULTIPLE: "PXB",
        lib.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
        lib.NVML_TOPOLOGY_NODE: "NODE",
        lib.NVML_TOPOLOGY_SYSTEM: "SYS",
    }
    return codes.get(level, NOT_AVAILABLE)


def _bits(words: Iterable[int], bits: int = 64) -> list[int]:
    """The set bits of a mask given as words, lowest first."""
    return [w * bits + b for w, word in enumerate(words) for b in range(bits) if int(word) >> b & 1]


def cpu_list(words: Iterable[int]) -> str:
    """``0-47,96-143`` from a CPU bitmask given as 64-bit words, lowest CPUs first."""
    cpus = _bits(words)
    out: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def _single_node(words: Iterable[int]) -> int | None:
    nodes = _bits(words)
    return nodes[0] if len(nodes) == 1 else None


class _Links:
    """One GPU's active NVLinks: per peer GPU index, and to the switch fabric."""

    def __init__(self) -> None:
        self.peers: Counter[int] = Counter()
        self.switch = 0


def _links(lib: Any, handle: Any, gpu_at: dict[str, int]) -> _Links:
    found = _Links()
    for link in range(int(lib.NVML_NVLINK_MAX_LINKS)):
        try:
            active = lib.nvmlDeviceGetNvLinkState(handle, link) == lib.NVML_FEATURE_ENABLED
        except lib.NVMLError:
            continue  # no NVLink on this GPU, or no such link: not active
        if not active:
            continue
        try:
            kind: int | None = int(lib.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
        except lib.NVMLError:
            kind = None  # an older driver: the remote's bus id must tell
        if kind == lib.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            found.switch += 1
            continue
        try:
            remote = canonical_bus_id(
                _text(lib.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            )
        except lib.NVMLError:
            continue
        if remote in gpu_at:
            found.peers[gpu_at[remote]] += 1
    return found


def _affinity(lib: Any, handle: Any, index: int, uuid: str, bus: str) -> GpuNumaAffinity:
    try:
        cpus = cpu_list(lib.nvmlDeviceGetCpuAffinity(handle, CPU_SET_WORDS))
    except lib.NVMLError:
        cpus = ""
    try:
        node = _single_node(
            lib.nvmlDeviceGetMemoryAffinity(handle, NODE_SET_WORDS, lib.NVML_AFFINITY_SCOPE_NODE)
        )
    except lib.NVMLError:
        node = None
    return GpuNumaAffinity(
        gpu=index, numa_node=node, cpu_affinity=cpus, gpu_uuid=uuid, pci_bus_id=bus
    )


def read_topology(lib: Any) -> Topology:
    """The topology of every GPU NVML lists (NVML initialised by the caller).

    Raises ``lib.NVMLError`` only where a GPU itself cannot be listed (count, handle,
    uuid, bus id): a snapshot without one of its GPUs would be a false topology.
    """
    count = int(lib.nvmlDeviceGetCount())
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    buses = [canonical_bus_id(_text(lib.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
    uuids = [_text(lib.nvmlDeviceGetUUID(h)) for h in handles]
    gpu_at = {bus: i for i, bus in enumerate(buses)}
    links = [_links(lib, h, gpu_at) for h in handles]
    pairs: list[GpuPairLink] = []
    for i in range(count):
        for j in range(i + 1, count):
            nv = links[i].peers[j]
            if links[i].switch and links[j].switch:
                nv += min(links[i].switch, links[j].switch)
            if nv:
                code = f"NV{nv}"
            else:
                try:
                    level = int(lib.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
                except lib.NVMLError:
                    code = NOT_AVAILABLE
                else:
                    code = level_code(lib, level)
            pairs.append(GpuPairLink(src_gpu=i, dst_gpu=j, link_type=code, nvlinks=nv))
    gpus = tuple(_affinity(lib, h, i, uuids[i], buses[i]) for i, h in enumerate(handles))
    return Topology(gpus=gpus, links=tuple(pairs))
