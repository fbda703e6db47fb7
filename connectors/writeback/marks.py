"""Node marks: our condition by server-side apply on nodes/status, an optional taint; and the
reconciliation that makes the nodes match the open incidents, once, whatever ran before.

Server-side apply under field manager ``gputriage-writeback``, never ``force``: a 409 is
another manager owning that condition type (NPD, the EKS agent, NVSentinel), logged and
counted, not fought. A condition is ours when ``managedFields`` names our manager on it,
or (a server that strips managedFields) its reason is one we write.

Traps: ``lastTransitionTime`` keeps its value while the status stays (re-applying a new one
on every restart is exactly karpenter #2833: repair's clock never runs out); nodes/status
apply needs ``apiVersion``, ``kind`` and ``metadata.name`` in the body; ``spec.taints`` is
an atomic list, so the taint is a merge patch of the whole list guarded by the
``resourceVersion`` read (a 409 retries on the next reconciliation).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from connectors.writeback.api import APPLY_PATCH, MERGE_PATCH, ApiError, Gate, Kube, raw, rfc3339
from connectors.writeback.breaker import Verdict, judge
from connectors.writeback.metrics import WritebackMetrics
from connectors.writeback.plan import (
    CLEAR_REASON,
    FIELD_MANAGER,
    REASONS,
    TAINT_KEY,
    condition_message,
    condition_reason,
)
from connectors.writeback.settings import WritebackSettings
from schemas.incidents import Incident
from schemas.wellknown import POOL_LABELS

log = logging.getLogger("gputriage.writeback")

CLEAR_MESSAGE: Final = "No page-level GPU hardware incident is open on this node."
OUR_REASONS: Final = frozenset((*REASONS.values(), "GPUIncident"))


def pool_of(node: Mapping[str, Any]) -> str:
    """The node's pool: the first of :data:`POOL_LABELS` present, else ``""``."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return next((str(labels[k]) for k in POOL_LABELS if labels.get(k)), "")


def condition_of(node: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def owned_by_us(node: Mapping[str, Any], kind: str) -> bool:
    """Our manager applied this condition type (managedFields), or its reason is ours."""
    key = f'k:{{"type":"{kind}"}}'
    for entry in (node.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, dict) or entry.get("manager") != FIELD_MANAGER:
            continue
        conditions = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions")
        if isinstance(conditions, dict) and key in conditions:
            return True
    condition = condition_of(node, kind)
    reason = str((condition or {}).get("reason") or "")
    return reason == CLEAR_REASON or reason.startswith("GPUXid") or reason in OUR_REASONS


def tainted(node: Mapping[str, Any]) -> bool:
    return any(
        isinstance(t, dict) and t.get("key") == TAINT_KEY
        for t in (node.get("spec") or {}).get("taints") or []
    )


@dataclass(frozen=True)
class Plan:
    """What one reconciliation writes: nodes to mark, to clear, and the breaker's verdict."""

    mark: dict[str, list[Incident]]
    clear: tuple[str, ...]
    verdict: Verdict
    marked_after: int
    unexplained: tuple[str, ...] = ()
    """Nodes carrying our fault mark that no incident we know explains: kept, never cleared."""


def reconcile_plan(
    desired: Mapping[str, list[Incident]],
    nodes: Sequence[Mapping[str, Any]],
    settings: WritebackSettings,
    explained: Callable[[str], bool] = lambda _: True,
) -> Plan:
    """Pure: from the open incidents per node and the listed nodes, what to write.

    A node already carrying our fault status for the same reason is left alone (no second
    apply); a node carrying ours without an open incident is cleared when ``explained``
    says an incident we know (a resolved revision, a tombstone) accounts for it, and kept
    otherwise (its incident may be gone from a time-retained topic while the GPU is still
    broken); a deleted node is neither. Kept marks count against the breaker. The breaker
    admits new marks in order of their oldest incident.
    """
    kind, fault = settings.condition_type, settings.fault_status
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    pools = {name: pool_of(n) for name, n in by_name.items()}
    sizes: dict[str, int] = {}
    for pool in pools.values():
        sizes[pool] = sizes.get(pool, 0) + 1

    def marked(node: Mapping[str, Any]) -> bool:
        condition = condition_of(node, kind)
        return (
            condition is not None and condition.get("status") == fault and owned_by_us(node, kind)
        )

    stale = sorted(name for name, n in by_name.items() if marked(n) and name not in desired)
    unexplained = tuple(name for name in stale if not explained(name))
    already = [name for name, n in by_name.items() if marked(n) and name in desired]
    wanted = sorted(
        (name for name in desired if name in by_name),
        key=lambda name: (desired[name][0].first_seen, name),
    )
    verdict = judge(
        wanted,
        [*already, *unexplained],
        pools,
        sizes,
        max_nodes=settings.max_marked_nodes,
        max_fraction=settings.max_pool_fraction,
    )
    mark = {name: desired[name] for name in verdict.allowed}
    for name in already:  # marked, but for an older reason: re-apply the new words
        condition = condition_of(by_name[name], kind) or {}
        if condition.get("reason") != condition_reason(desired[name]):
            mark[name] = desired[name]
    clear = tuple(name for name in stale if name not in unexplained)
    return Plan(
        mark=mark,
        clear=clear,
        verdict=verdict,
        marked_after=len(already) + len(unexplained) + len(verdict.allowed),
        unexplained=unexplained,
    )


class NodeMarker:
    """Applies and clears our condition (and taint) on nodes."""

    def __init__(
        self,
        kube: Kube,
        gate: Gate,
        metrics: WritebackMetrics,
        settings: WritebackSettings,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.metrics = metrics
        self.settings = settings
        self.clock = clock
        self.page_size = 500
        """Nodes per list request."""
        self.failures = 0
        """Writes of the last reconciliation that failed or met a conflict (to retry)."""

    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every node, :attr:`page_size` at a time (``limit``/``continue``): one list of a
        large fleet's full Node objects would not fit the container's memory in one piece."""
        nodes: list[dict[str, Any]] = []
        token = ""
        while True:
            page: dict[str, Any] = {"limit": self.page_size}
            if token:
                page["_continue"] = token
            status, body = await self.kube.call(
                self.kube.core.list_node(_preload_content=False, **page), "listing nodes"
            )
            if status != 200 or not isinstance(body, dict):
                raise ApiError(f"listing nodes: HTTP {status}")
            nodes.extend(n for n in body.get("items") or [] if isinstance(n, dict))
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return nodes

    async def reconcile(
        self,
        desired: Mapping[str, list[Incident]],
        explained: Callable[[str], bool] = lambda _: True,
    ) -> Plan:
        """List the nodes, then clear and mark what :func:`reconcile_plan` says, once.

        Clears go first, so one pass never has more nodes marked than the breaker allows.
        :attr:`failures` counts the writes of this pass that failed or met a conflict.
        """
        self.failures = 0
        nodes = await self.list_nodes()
        plan = reconcile_plan(desired, nodes, self.settings, explained)
        by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
        self.metrics.unexplained.set(len(plan.unexplained))
        if plan.unexplained:
            log.warning(
                "%d node(s) carry our fault mark that no incident in the topic explains; kept: %s",
                len(plan.unexplained),
                ", ".join(plan.unexplained[:10]),
            )
        self.metrics.breaker_tripped.set(1 if plan.verdict.tripped else 0)
        if plan.verdict.tripped:
            self.metrics.withheld.inc(len(plan.verdict.withheld))
            log.error(
                "breaker: %d node(s) not marked (at most %d nodes, %.0f%% of a pool): %s",
                len(plan.verdict.withheld),
                self.settings.max_marked_nodes,
                self.settings.max_pool_fraction * 100,
                ", ".join(plan.verdict.withheld[:10]),
            )
        for name in plan.clear:
            await self.apply(by_name[name], _healthy(self.settings.fault_status), [])
        for name, incidents in plan.mark.items():
            await self.apply(by_name[name], self.settings.fault_status, incidents)
        if self.settings.taint:  # a taint patch lost to a race (409) is retried here
            for name, node in by_name.items():
                if name in plan.mark or name in plan.clear or name in plan.unexplained:
                    continue
                want = name in desired and name not in plan.verdict.withheld
                if tainted(node) != want:
                    await self.set_taint(node, want)
        self.metrics.marked.set(plan.marked_after)
        return plan

    async def apply(self, node: Mapping[str, Any], status: str, incidents: list[Incident]) -> str:
        """SSA our condition on one node (``incidents`` empty: the clear)."""
        name = str((node.get("metadata") or {}).get("name"))
        kind = self.settings.condition_type
        reason = condition_reason(incidents) if incidents else CLEAR_REASON
        message = condition_message(incidents) if incidents else CLEAR_MESSAGE
        current = condition_of(node, kind) or {}
        now = rfc3339(self.clock())
        since = current.get("lastTransitionTime") if current.get("status") == status else None
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since or now,
            "lastHeartbeatTime": now,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"conditions": [condition]},
        }
        line = f"condition/node {name} {kind}={status} reason={reason}"
        try:
            answer = await self.gate.write(
                "condition",
                line,
                lambda: self.kube.call(
                    self.kube.core.patch_node_status(
                        name,
                        body,
                        field_manager=FIELD_MANAGER,
                        **raw(APPLY_PATCH),
                    ),
                    f"applying {kind} on node {name}",
                ),
            )
        except ApiError as exc:
            log.warning("%s", exc)
            self.metrics.wrote("condition", "error")
            self.failures += 1
            return "error"
        if answer is None:
            outcome = "dry_run"
        elif answer[0] == 409:
            log.warning(
                "node %s: condition %s is owned by another field manager; not forced",
                name,
                kind,
            )
            outcome = "conflict"
        elif answer[0] == 404:
            outcome = "skipped"
        elif answer[0] in (200, 201):
            outcome = "applied" if incidents else "cleared"
        else:
            outcome = "error"
        if answer is not None:  # the gate counted the dry run
            self.metrics.wrote("condition", outcome)
        if outcome in ("error", "conflict"):
            self.failures += 1
        if self.settings.taint and outcome in ("applied", "cleared", "dry_run"):
            # the apply's answer carries the new resourceVersion the taint patch is guarded by
            fresh = answer[1] if answer is not None and isinstance(answer[1], dict) else node
            await self.set_taint(fresh, bool(incidents))
        return outcome

    async def set_taint(self, node: Mapping[str, Any], on: bool) -> str:
        """Add or remove ``gputriage.io/gpu-fault`` (merge patch of the list, resourceVersion
        guarded)."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        if tainted(node) == on:
            return "unchanged"
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if isinstance(t, dict) and t.get("key") != TAINT_KEY
        ]
        if on:
            taints.append({"key": TAINT_KEY, "value": "true", "effect": self.settings.taint})
        patch: dict[str, Any] = {"spec": {"taints": taints}}
        if meta.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        verb = "add" if on else "remove"
        try:
            answer = await self.gate.write(
                "taint",
                f"taint/node {name} {verb} {TAINT_KEY}:{self.settings.taint}",
                lambda: self.kube.call(
                    self.kube.core.patch_node(name, patch, **raw(MERGE_PATCH)),
                    f"tainting node {name}",
                ),
            )
        except ApiError as exc:
            log.warning("%s", exc)
            answer = (500, None)
        if answer is None:
            return "dry_run"
        outcome = {200: "applied", 409: "conflict"}.get(answer[0], "error")
        self.metrics.wrote("taint", outcome)
        if outcome != "applied":
            self.failures += 1
        return outcome


def _healthy(fault_status: str) -> str:
    return "True" if fault_status == "False" else "False"
