"""Pod and node Events (events.k8s.io/v1): one per (incident, object), bumped, never repeated.

Create first; 409 means a run before us (or before a SIGKILL) made it: read it, and bump
its ``series`` (count, lastObservedTime) only when our revision is newer than the one its
annotation records, so a restart re-applying the same revision writes nothing. The pod is
read first: ``regarding.uid`` must be set (Flyte rejects an Event without it), a pod
that is gone gets no Event, and neither does a pod created after the incident's last
evidence (a namesake recreated by its StatefulSet or job: the fault was not its own).

Traps: events.k8s.io makes ``note``, ``reason``, ``type`` and ``action`` immutable, so a
revision that changes the words (a ticket escalated to a page) deletes and recreates the
Event under the same name; an ``eventTime`` Event needs ``reportingController`` (a
qualified name) and ``reportingInstance`` (<= 128 characters); a Node's Events live in
namespace ``default``, where the kubelet writes its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, cast

from connectors.writeback.api import MERGE_PATCH, ApiError, Gate, Kube, micro_time, raw
from connectors.writeback.metrics import WritebackMetrics
from connectors.writeback.plan import (
    CONTROLLER,
    INCIDENT_ANNOTATION,
    MANAGED_BY,
    MANAGED_LABEL,
    REVISION_ANNOTATION,
    EventWrite,
)

log = logging.getLogger("gputriage.writeback")

KIND: Final = "event"


def _revision(event: Any) -> int:
    try:
        return int(event["metadata"]["annotations"][REVISION_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        return -1


class _Namesake(Exception):
    """The pod of that name was created after the incident's evidence: another pod."""


def _time(value: Any) -> datetime | None:
    """A Kubernetes Time (``2026-11-30T14:00:00Z``), or None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class EventWriter:
    """Writes :class:`~connectors.writeback.plan.EventWrite` s through the gate."""

    def __init__(
        self,
        kube: Kube,
        gate: Gate,
        metrics: WritebackMetrics,
        *,
        identity: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.metrics = metrics
        self.identity = identity[:128] or "gputriage-writeback"
        self.clock = clock

    def _line(self, write: EventWrite) -> str:
        where = f"{write.object_namespace}/" if write.object_namespace else ""
        return (
            f"event/{write.kind.lower()} {where}{write.object_name} reason={write.reason} "
            f"note={write.note}"
        )

    async def _regarding(self, write: EventWrite) -> dict[str, Any] | None:
        if write.kind == "Pod":
            status, obj = await self.kube.call(
                self.kube.core.read_namespaced_pod(
                    write.object_name, write.object_namespace, _preload_content=False
                ),
                f"reading pod {write.object_namespace}/{write.object_name}",
            )
        else:
            status, obj = await self.kube.call(
                self.kube.core.read_node(write.object_name, _preload_content=False),
                f"reading node {write.object_name}",
            )
        if status == 404 or not isinstance(obj, dict):
            return None
        meta = obj.get("metadata") or {}
        created = _time(meta.get("creationTimestamp"))
        if write.not_after is not None and created is not None and created > write.not_after:
            raise _Namesake
        ref: dict[str, Any] = {"apiVersion": "v1", "kind": write.kind, "name": write.object_name}
        if write.object_namespace:
            ref["namespace"] = write.object_namespace
        if meta.get("uid"):
            ref["uid"] = meta["uid"]
        if meta.get("resourceVersion"):
            ref["resourceVersion"] = meta["resourceVersion"]
        return ref

    def body(self, write: EventWrite, regarding: dict[str, Any]) -> dict[str, Any]:
        """The Event as created (also what tests compare with the Flyte fixtures)."""
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": write.name,
                "namespace": write.namespace,
                "labels": {MANAGED_LABEL: MANAGED_BY},
                "annotations": {
                    INCIDENT_ANNOTATION: write.incident_id,
                    REVISION_ANNOTATION: str(write.revision),
                },
            },
            "eventTime": micro_time(self.clock()),
            "reportingController": CONTROLLER,
            "reportingInstance": self.identity,
            "action": write.action,
            "reason": write.reason,
            "regarding": regarding,
            "note": write.note,
            "type": write.type,
        }

    async def apply(self, write: EventWrite) -> str:
        """Create or bump the Event; answers the outcome (also counted)."""
        outcome = await self._apply(write)
        if outcome != "dry_run":  # counted by the gate
            self.metrics.wrote(KIND, outcome)
        return outcome

    async def _apply(self, write: EventWrite) -> str:
        try:
            try:
                regarding = await self._regarding(write)
            except _Namesake:
                log.info(
                    "pod %s/%s was created after the incident's last evidence (a namesake): "
                    "no Event",
                    write.object_namespace,
                    write.object_name,
                )
                return "recreated"
            if regarding is None:
                log.info("%s %s is gone: no Event", write.kind.lower(), write.object_name)
                return "skipped"
            body = self.body(write, regarding)
            answer = await self.gate.write(KIND, self._line(write), lambda: self._create(body))
            if answer is None:
                return "dry_run"
            status, _ = answer
            if status in (200, 201):
                return "created"
            if status != 409:
                log.warning("creating event %s/%s: HTTP %s", write.namespace, write.name, status)
                return "error"
            return await self._bump(write, body)
        except ApiError as exc:
            log.warning("%s", exc)
            return "error"

    async def _create(self, body: dict[str, Any]) -> tuple[int, Any]:
        namespace = body["metadata"]["namespace"]
        return await self.kube.call(
            self.kube.events.create_namespaced_event(namespace, cast(Any, body), **raw()),
            f"creating event {namespace}/{body['metadata']['name']}",
        )

    async def _bump(self, write: EventWrite, body: dict[str, Any]) -> str:
        """The Event exists: bump its series if we are newer; recreate if the words changed."""
        status, existing = await self.kube.call(
            self.kube.events.read_namespaced_event(
                write.name, write.namespace, _preload_content=False
            ),
            f"reading event {write.namespace}/{write.name}",
        )
        if status == 404 or not isinstance(existing, dict):
            answer = await self.gate.write(KIND, self._line(write), lambda: self._create(body))
            return "created" if answer is not None and answer[0] in (200, 201) else "error"
        if _revision(existing) >= write.revision:
            return "unchanged"
        same_words = all(existing.get(k) == body[k] for k in ("note", "reason", "type", "action"))
        if not same_words:
            await self._delete(write)
            answer = await self.gate.write(KIND, self._line(write), lambda: self._create(body))
            return "replaced" if answer is not None and answer[0] in (200, 201) else "error"
        series = existing.get("series") or {}
        count: int = series["count"] if isinstance(series.get("count"), int) else 1
        patch = {
            "metadata": {"annotations": {REVISION_ANNOTATION: str(write.revision)}},
            "series": {"count": count + 1, "lastObservedTime": micro_time(self.clock())},
        }
        answer = await self.gate.write(
            KIND,
            self._line(write) + f" series.count={count + 1}",
            lambda: self.kube.call(
                self.kube.events.patch_namespaced_event(
                    write.name,
                    write.namespace,
                    patch,
                    **raw(MERGE_PATCH),
                ),
                f"patching event {write.namespace}/{write.name}",
            ),
        )
        return "updated" if answer is not None and answer[0] == 200 else "error"

    async def _delete(self, write: EventWrite) -> int:
        answer = await self.gate.write(
            KIND,
            f"delete event/{write.kind.lower()} {write.namespace}/{write.name}",
            lambda: self.kube.call(
                self.kube.events.delete_namespaced_event(
                    write.name, write.namespace, _preload_content=False
                ),
                f"deleting event {write.namespace}/{write.name}",
            ),
        )
        return answer[0] if answer is not None else 0

    async def delete(self, write: EventWrite) -> str:
        """Delete the Event of a resolved incident (gone already: fine)."""
        try:
            status = await self._delete(write)
        except ApiError as exc:
            log.warning("%s", exc)
            outcome = "error"
        else:
            if status == 0:
                return "dry_run"  # counted by the gate
            outcome = {200: "deleted", 202: "deleted", 404: "unchanged"}.get(status, "error")
        self.metrics.wrote(KIND, outcome)
        return outcome

    async def leftovers(self) -> list[dict[str, Any]]:
        """Every Event we wrote that is still there (our label), in every namespace."""
        status, body = await self.kube.call(
            self.kube.events.list_event_for_all_namespaces(
                label_selector=f"{MANAGED_LABEL}={MANAGED_BY}", _preload_content=False
            ),
            "listing our events",
        )
        if status != 200 or not isinstance(body, dict):
            return []
        items = body.get("items") or []
        return [
            e
            for e in items
            if isinstance(e, dict)
            and ((e.get("metadata") or {}).get("labels") or {}).get(MANAGED_LABEL) == MANAGED_BY
        ]

    async def delete_named(self, namespace: str, name: str) -> str:
        """Delete one leftover Event by name."""
        try:
            answer = await self.gate.write(
                KIND,
                f"delete event {namespace}/{name}",
                lambda: self.kube.call(
                    self.kube.events.delete_namespaced_event(
                        name, namespace, _preload_content=False
                    ),
                    f"deleting event {namespace}/{name}",
                ),
            )
        except ApiError as exc:
            log.warning("%s", exc)
            answer = (500, None)
        if answer is None:
            return "dry_run"
        outcome = "deleted" if answer[0] in (200, 202) else "unchanged"
        self.metrics.wrote(KIND, outcome)
        return outcome
