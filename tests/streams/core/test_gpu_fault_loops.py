"""A crash loop whose termination message names a GPU hardware or driver fault.

The type is what an on-call reads first: "suspected CUDA OOM" (with a ``cause``
attribute nobody reads at 3 a.m.) sends them to shrink a batch while the GPU is broken.
Such a loop is typed ``gpu_fault_crash_loop``, or joins the GPU's open hardware incident
as an affected pod. Messages are copied from the public reports that
``schemas/termination_causes.toml`` cites for each pattern.
"""

from __future__ import annotations

import pytest

from schemas.incidents import Incident
from schemas.termination_causes import parse_causes
from streams.core.rules.registry import DEFAULT_SEVERITY
from tests.core_helpers import config, of_type, run
from tests.crash_loops import BUS, CRASHES, MIN, UUID, loop, setup
from tests.factories import Cluster

OOM_KIND = "suspected_cuda_oom"
FAULT = "gpu_fault_crash_loop"

ECC = (
    "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)
"""https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/194"""
ECC_DRIVER_API = (  # the end of the reporter's one line
    "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC "
    "error encountered"
)
"""https://github.com/nagadit/DeepFaceLab_Linux/issues/89"""
GPU_LOST = (
    '  File "/usr/local/lib/python2.7/dist-packages/pynvml.py", line 405, in _nvmlCheckReturn\n'
    "    raise NVMLError(ret)\nNVMLError_GpuIsLost: GPU is lost"
)
"""https://github.com/rossumai/nvgpu/issues/6"""
SMI_LOST = (
    "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the "
    "system to recover this GPU"
)
"""https://github.com/JosephKJ/OWOD/issues/81"""
NVLINK = "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution"
"""https://github.com/MIC-DKFZ/nnUNet/issues/1519"""
NVML_UNKNOWN = (
    '  File "/mnt/lustre/work/martius/mot030/conda/envs/torch-nightly/lib/python3.12/'
    'site-packages/pynvml.py", line 1042, in _nvmlCheckReturn\n'
    "    raise NVMLError(ret)\npynvml.NVMLError_Unknown: Unknown Error"
)
"""https://github.com/sehoffmann/dmlcloud/issues/58"""
SMI_UNKNOWN = "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error"
"""https://github.com/rwth-i6/returnn/issues/1486"""
KMSG_79 = "[1084456.074562] NVRM: Xid (PCI:0000:09:00): 79, pid=0, GPU has fallen off the bus."
"""https://github.com/NVIDIA/nvidia-docker/issues/1553"""
KMSG_45 = (
    "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused "
    "by previous Xid 149"
)
"""https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150 (a cleanup XID: no fault)"""
ILLEGAL = (
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing "
    "CUDA_LAUNCH_BLOCKING=1.\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
    "assertions."
)
"""https://github.com/NVIDIA/TensorRT/issues/3491"""


def loops(revisions: list[Incident]) -> list[Incident]:
    return of_type(revisions, OOM_KIND) + of_type(revisions, FAULT)


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        (ECC, "gpu_fault"),
        (ECC_DRIVER_API, "gpu_fault"),
        (GPU_LOST, "gpu_fault"),
        (SMI_LOST, "gpu_fault"),
        (NVLINK, "gpu_fault"),
        (KMSG_79, "gpu_fault"),
        (NVML_UNKNOWN, "driver_fault"),
        (SMI_UNKNOWN, "driver_fault"),
    ],
    ids=["ecc", "ecc-driver-api", "pynvml-lost", "smi-lost", "nvlink", "kmsg-79", "nvml", "smi"],
)
def test_a_loop_naming_a_gpu_fault_is_typed_as_one(message: str, cause: str) -> None:
    """Failed before: typed ``suspected_cuda_oom`` (``cause`` an attribute), or, for the
    texts the table did not know (GPU lost, NVLink, a kernel XID line), the plain OOM
    suspicion with "reduce batch size". Now the type says it: a GPU fault, naming the
    pod's GPU, at the type's own severity."""
    c = Cluster()
    loop(c, CRASHES, message)
    revisions = run(c.events)
    assert of_type(revisions, OOM_KIND) == []
    [inc] = of_type(revisions, FAULT)
    assert inc.attributes["cause"] == cause
    assert inc.severity == DEFAULT_SEVERITY[FAULT]
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [(UUID, BUS)]
    assert [(p.name, p.role) for p in inc.pods] == [("ft", "restarting")]
    assert "not CUDA OOM" in inc.summary
    assert "reduce batch size" not in inc.action
    assert UUID in inc.action


def test_an_application_xid_line_is_not_a_gpu_fault() -> None:
    """Regression guard: a cleanup XID 45 (and 13/31/43) in the message is the workload's:
    no GPU-fault type (the loop stays the unnamed suspicion)."""
    c = Cluster()
    loop(c, CRASHES, KMSG_45)
    revisions = run(c.events)
    assert of_type(revisions, FAULT) == []
    [inc] = of_type(revisions, OOM_KIND)
    assert "cause" not in inc.attributes


def test_a_kernel_fault_alone_stays_the_workloads() -> None:
    """Regression guard: an illegal memory access with no fatal XID is most often the
    code's: typed as before (``suspected_cuda_oom``, ``cause`` = ``kernel_fault``)."""
    c = Cluster()
    loop(c, CRASHES, ILLEGAL)
    [inc] = loops(run(c.events))
    assert (inc.type, inc.attributes["cause"]) == (OOM_KIND, "kernel_fault")


def test_a_kernel_fault_after_a_fatal_xid_on_its_gpu_is_no_cuda_oom() -> None:
    """An illegal memory access seconds after an XID 79 on the pod's own GPU is the GPU's
    doing: the loop is in a hardware incident (the eviction chain's), never a CUDA OOM
    suspicion."""
    c = Cluster()
    setup(c)
    c.xid("n3", 50, 79, bus=BUS, uuid=UUID)
    loop(c, [55, 2 * MIN, 4 * MIN, 6 * MIN], ILLEGAL, fresh=False)
    revisions = run(c.events)
    assert of_type(revisions, OOM_KIND) == []
    hardware = [
        inc
        for inc in (*of_type(revisions, FAULT), *of_type(revisions, "device_unhealthy_eviction"))
        if any(p.name == "ft" for p in inc.pods)
    ]
    assert len(hardware) == 1


def test_a_kernel_fault_loop_begun_just_after_a_fatal_xid_is_a_gpu_fault() -> None:
    """Failed before: with the eviction chain's window closed (here configured to 5 s), a
    loop of illegal memory accesses that began 8 s after an XID 79 on the pod's own GPU
    was ``suspected_cuda_oom`` (``cause`` = ``kernel_fault``). The XID killed the kernels:
    the loop is the GPU's, typed so, naming the GPU, and the later crashes (minutes after
    the XID) stay in it."""
    c = Cluster()
    setup(c)
    c.xid("n3", 50, 79, bus=BUS, uuid=UUID)
    loop(c, [58, 90, 150, 200], ILLEGAL, fresh=False)
    revisions = run(c.events, config(eviction_window_seconds=5))
    assert of_type(revisions, OOM_KIND) == []
    [inc] = of_type(revisions, FAULT)
    assert inc.attributes["cause"] == "kernel_fault"
    assert "fatal XID" in inc.summary
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [(UUID, BUS)]
    assert inc.attributes["restarts_in_window"] == "4"


def _repeat_then_loop(message: str) -> list[Incident]:
    """Five XID 48 episodes 15 min apart on the pod's GPU (an ``xid_repeat`` page), then,
    half an hour later (every window closed), the pod's container crash-loops."""
    c = Cluster()
    setup(c)
    for k in range(5):
        c.xid("n3", 10 + k * 15 * MIN, 48, bus=BUS, uuid=UUID)
    start = 90 * MIN
    loop(c, [start + t for t in CRASHES], message, fresh=False)
    return run(c.events)


def test_a_gpu_fault_loop_joins_the_gpus_open_xid_repeat() -> None:
    """Failed before: a second incident (``suspected_cuda_oom`` with ``cause``) beside the
    GPU's open ``xid_repeat`` page. One fault, one incident: the pod is named on the
    page, its crash is evidence there."""
    revisions = _repeat_then_loop(ECC)
    assert loops(revisions) == []
    [page] = of_type(revisions, "xid_repeat")
    assert page.status != "resolved"
    assert ("ft", "restarting") in [(p.name, p.role) for p in page.pods]
    assert any("uncorrectable ECC" in e.text for e in page.evidence)


def test_the_table_without_device_still_loads() -> None:
    """A table written before ``device`` existed still loads: its classes type as before."""
    table = parse_causes(
        'precedence = ["cuda_oom"]\n[class.cuda_oom]\nlabel = "x"\naction = "y"\n'
        '[[pattern]]\nclass = "cuda_oom"\nregex = "CUDA out of memory"\n'
        'source = "https://github.com/pytorch/pytorch/issues/59778"\n'
    )
    assert [c.device for c in table.classes] == [False]
