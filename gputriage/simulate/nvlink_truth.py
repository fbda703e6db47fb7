"""Ground truth for ``multi_gpu_pod_without_nvlink``: watched, pod by pod, on PCIe-only nodes.

The fault is the fleet itself: some nodes are PCIe-only boxes, and the default scheduler,
which does not read the topology, places multi-GPU pods there. So the truth is watched, not
injected (no rng draw): when a multi-GPU pod on a PCIe-only node is Running and the
bindings name it on every GPU it holds, one expectation for the pod (its uid),
``first_seen`` between the two moments.

Trap: a pod whose own records say it failed or is being deleted before its bindings are
complete gives no incident (the core does not judge a failed pod): no truth then.
docs/replay.md, design notes: the NVLink truth.
"""

from __future__ import annotations

from datetime import datetime

from gputriage.simulate.model import Node, Pod
from gputriage.simulate.truth import TruthRecorder

KIND = "multi_gpu_pod_without_nvlink"
FAULT = "multi_gpu_no_nvlink"


class NvlinkTruth:
    """Watches pod and binding records of PCIe-only nodes; writes into ``truth``."""

    def __init__(self, truth: TruthRecorder) -> None:
        self.truth = truth
        self._running: dict[str, datetime] = {}
        """Multi-GPU pods on PCIe-only nodes: uid -> their first Running record's time."""
        self._done: set[str] = set()
        """Pods already expected, or ended before they could be (membership only)."""

    def pod_record(self, pod: Pod, time: datetime) -> None:
        """A pod record was emitted with the pod as it is now."""
        node = pod.node
        if node is None or not node.pcie or pod.workload.gpus < 2 or pod.uid in self._done:
            return
        if pod.phase != "Running" or pod.deleting is not None:
            if pod.uid in self._running or pod.phase in ("Succeeded", "Failed"):
                self._done.add(pod.uid)  # it ended (or is going) before it was judged
            return
        self._running.setdefault(pod.uid, time)
        self._check(node, pod, time)

    def binding(self, node: Node, pod: Pod | None, time: datetime) -> None:
        """A binding record naming ``pod`` (or no pod) was emitted for a GPU of ``node``."""
        if pod is None or not node.pcie or pod.uid in self._done or pod.uid not in self._running:
            return
        self._check(node, pod, time)

    def _check(self, node: Node, pod: Pod, time: datetime) -> None:
        if not all(node.gpus[k].reported is pod for k in pod.gpus):
            return
        self._done.add(pod.uid)
        since = self._running.pop(pod.uid)
        template = pod.workload.template
        self.truth.expect(
            fault_id=self.truth.fault_id(FAULT),
            kind=KIND,
            cluster=node.cluster.name,
            start=since,
            first=since,
            last=time,
            node=node.name,
            pods=(f"{template.namespace}/{pod.name}",),
            gpus=tuple(node.gpus[k].uuid for k in pod.gpus),
            owner=f"{template.kind}/{pod.workload.owner}",
            severity="ticket",
        )
