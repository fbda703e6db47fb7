"""What the CLI composes across source families, which never import each other.

NVML (:mod:`connectors.nvml`) serves two other families: the pod-resources source
gets its GPU map (MIG device ids -> parent GPU and instance), the topology source
its NVML handle. Both degrade without a driver rather than fail: a node without
NVML still has a kubelet and an ``nvidia-smi``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from connectors.podresources.devices import GpuMap


def open_nvml(lib: Any = None) -> Any:
    """NVML opened for ``connect topo``, or why not (the topology source takes either)."""
    from connectors.nvml.devices import Nvml, NvmlUnavailable  # noqa: PLC0415

    try:
        return Nvml(lib).open()
    except NvmlUnavailable as exc:
        return str(exc)


def nvml_gpu_map(lib: Any = None) -> GpuMap:
    """NVML's devices as the pod-resources source's :class:`GpuMap` (empty without a driver:
    logged; MIG bindings then carry only their ``MIG-`` uuid, see connectors.podresources)."""
    from connectors.nvml.devices import Nvml, NvmlUnavailable  # noqa: PLC0415
    from connectors.podresources.devices import GpuInfo, GpuMap  # noqa: PLC0415

    try:
        with Nvml(lib) as nvml:
            devices = nvml.devices()
    except NvmlUnavailable as exc:
        logging.getLogger("gputriage.podresources").info(
            "%s: MIG device ids will not name their parent GPU", exc
        )
        return GpuMap()
    return GpuMap.of(
        GpuInfo(
            uuid=d.parent_uuid or d.uuid,
            pci_bus_id=d.pci_bus_id,
            index=d.index,
            gpu_instance=d.gpu_instance_id if d.parent_uuid else None,
            mig_uuid=d.uuid if d.parent_uuid else "",
            mig_profile=d.mig_profile,
        )
        for d in devices
    )
