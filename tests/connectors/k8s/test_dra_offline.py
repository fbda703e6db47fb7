"""``gputriage ingest k8s`` on kubectl dumps of the DRA kinds (tests/data/dra), joined as the
live connector joins them, through a subprocess like a user's shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from schemas.codec import decode_event
from schemas.events import GpuBindingEvent, PodEvent, ResourceClaimEvent, ResourceSliceEvent
from schemas.keys import DRA
from tests import paths
from tests.cli_helpers import gputriage

DATA = paths.DATA / "dra"


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads((DATA / f"{name}.json").read_bytes())
    return obj


def kubectl_list(*names: str) -> bytes:
    """What ``kubectl get a,b,c -o json`` prints: one List of the objects, each with its kind."""
    return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [load(n) for n in names]})


def test_a_dump_of_the_dra_kinds_gives_slices_claims_bindings_and_gpu_pods(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dump.json"
    path.write_bytes(
        kubectl_list(
            "devicetaintrule",
            "resourceslice_device_taint",
            "resourceclaimtemplate",
            "resourceclaim_allocated",
            "deviceclass_gpu",  # not read: reported, the rest goes on
            "pod_with_claims",
        )
    )
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "prod")
    assert proc.returncode == 1
    assert b"unsupported kind 'DeviceClass'" in proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    assert [type(e).__name__ for e in events] == [
        "ResourceSliceEvent",
        "ResourceClaimEvent",
        "GpuBindingEvent",
        "PodEvent",
    ]
    sliced, claim, binding, pod = events
    assert isinstance(sliced, ResourceSliceEvent)
    gpu_2 = next(d for d in sliced.devices if d.name == "gpu-2")
    # The driver's own NoSchedule taint and the rule's NoExecute one.
    assert [(t.effect, t.rule) for t in gpu_2.taints] == [
        ("NoSchedule", ""),
        ("NoExecute", "evict-gpu-2-xid-79"),
    ]
    assert isinstance(claim, ResourceClaimEvent)
    assert claim.node == "gpu-a100-node-01"
    assert isinstance(binding, GpuBindingEvent)
    assert (binding.source, binding.gpu_uuid, binding.device) == (DRA, gpu_2.uuid, "gpu-2")
    assert isinstance(pod, PodEvent)
    assert pod.gpu_requests == {}  # no device plugin: a GPU pod by its claim alone
    assert [(c.claim, c.gpus, c.device_class) for c in pod.claims] == [
        ("pod1-gpu-h6vrt", 1, "gpu.nvidia.com")
    ]


def test_other_drivers_and_classes_count_as_gpus_when_told(tmp_path: Path) -> None:
    sliced = load("resourceslice_gpu_node")
    sliced["spec"]["driver"] = "gpu.example.com"
    path = tmp_path / "dump.json"
    path.write_bytes(orjson.dumps({"kind": "List", "items": [sliced]}))
    default = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "prod")
    assert default.returncode == 0, default.stderr
    assert default.stdout == b""
    told = gputriage(
        "ingest", "k8s", "--file", str(path), "--cluster", "prod", "--gpu-driver", "gpu.example.com"
    )
    assert told.returncode == 0, told.stderr
    (event,) = [decode_event(line) for line in told.stdout.splitlines()]
    assert isinstance(event, ResourceSliceEvent)
    assert event.driver == "gpu.example.com"
