"""Leader election over a coordination.k8s.io/v1 Lease: only one replica watches and produces.

Several replicas of ``gputriage connect k8s`` would each produce every change. client-go's
``leaderelection`` algorithm, on raw dicts: acquire or renew with a patch carrying the
``resourceVersion`` read (a race gets 409), judge expiry by observing the record unchanged
on our monotonic clock (never by comparing clocks), step down before the lease can expire
for the others, release on a clean stop.

Traps: every attempt is bounded by the renew deadline (the client sends with no timeout);
a leader that loses the lease must stop producing at once (:meth:`LeaseElector.run`
cancels the work and waits for it); RBAC needs get/create/patch on leases.
``kubernetes_asyncio.leaderelection`` is not used: it lets a replica keep working without
the lease. Its faults, by line: docs/connectors.md, design notes: connectors/k8s/leader.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api

from connectors.k8s.metrics import ConnectorMetrics
from schemas import codec

log = logging.getLogger("gputriage.connect.k8s.leader")


@dataclass(frozen=True)
class LeaseOptions:
    """Which Lease (``name``: the settings' ``lease_name``), who we are, and client-go's
    three timings (defaults: 15/10/2 s)."""

    namespace: str
    identity: str
    name: str
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity")
        if (
            not 0
            < self.retry_period_seconds
            < self.renew_deadline_seconds
            < self.lease_duration_seconds
        ):
            raise ValueError("need 0 < retry period < renew deadline < lease duration")


class LeadershipLost(Exception):
    """Renewal failed for longer than the renew deadline: stop working now."""


async def _raw(call: Awaitable[Any]) -> aiohttp.ClientResponse:
    """The raw response of an API call made with ``_preload_content=False`` (typed as such)."""
    response: aiohttp.ClientResponse = await call
    return response


def _loop_time() -> float:
    """The running loop's clock, the one ``asyncio.sleep`` and ``asyncio.timeout`` follow:
    expiry, deadlines and retries then move together under a test's fake clock (looptime)."""
    return asyncio.get_running_loop().time()


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate. :meth:`run` waits for the lease, works while holding it, releases it."""

    def __init__(
        self,
        api: ApiClient,
        options: LeaseOptions,
        *,
        metrics: ConnectorMetrics | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.options = options
        self.metrics = metrics
        self._api = CoordinationV1Api(api)
        self._monotonic = monotonic or _loop_time
        self.is_leader = False
        self.attempts = 0
        """Acquire/renew attempts so far (tests wait on it)."""
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0
        """Monotonic start of the last successful attempt while leading."""
        self._held = False
        """We acquired the lease at some point: :meth:`release` has a record to clear."""

    # -- one attempt -------------------------------------------------------------------
    async def _read(self) -> dict[str, Any] | None:
        o = self.options
        response = await _raw(
            self._api.read_namespaced_lease(o.name, o.namespace, _preload_content=False)
        )
        try:
            body = await response.read()
        finally:
            response.release()
        if response.status == 404:
            return None
        if response.status != 200:
            raise RuntimeError(f"reading lease {o.namespace}/{o.name}: HTTP {response.status}")
        lease = codec.loads(body)
        return lease if isinstance(lease, dict) else {}

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards. Never raises for API errors."""
        self.attempts += 1
        o = self.options
        now = _micro_time(datetime.now(UTC))
        try:
            lease = await self._read()
            if lease is None:
                body: Any = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": o.name, "namespace": o.namespace},
                    "spec": {
                        "holderIdentity": o.identity,
                        "leaseDurationSeconds": max(1, round(o.lease_duration_seconds)),
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": 0,
                    },
                }
                response = await _raw(
                    self._api.create_namespaced_lease(o.namespace, body, _preload_content=False)
                )
                response.release()
                return response.status in (200, 201)
            spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
            assert isinstance(spec, dict)
            record = tuple(
                spec.get(k)
                for k in ("holderIdentity", "renewTime", "acquireTime", "leaseTransitions")
            )
            if record != self._observed:
                self._observed = record
                self._observed_at = self._monotonic()
            holder = spec.get("holderIdentity") or ""
            duration = spec.get("leaseDurationSeconds") or o.lease_duration_seconds
            if holder and holder != o.identity and self._monotonic() < self._observed_at + duration:
                return False
            transitions = spec.get("leaseTransitions") or 0
            patch_spec: dict[str, Any] = {
                "holderIdentity": o.identity,
                "leaseDurationSeconds": max(1, round(o.lease_duration_seconds)),
                "renewTime": now,
            }
            if holder != o.identity:
                patch_spec["acquireTime"] = now
                patch_spec["leaseTransitions"] = transitions + 1
            meta = lease.get("metadata") if isinstance(lease.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            patch: dict[str, Any] = {"spec": patch_spec}
            if meta.get("resourceVersion"):
                patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
            response = await _raw(
                self._api.patch_namespaced_lease(o.name, o.namespace, patch, _preload_content=False)
            )
            response.release()
            if response.status == 409:
                return False  # somebody wrote in between: not ours this round
            return 200 <= response.status < 300
        except (aiohttp.ClientError, OSError, TimeoutError, RuntimeError, ValueError) as exc:
            log.warning("lease %s/%s: %r", o.namespace, o.name, exc)
            return False

    # -- the loop ----------------------------------------------------------------------
    def _set_leader(self, value: bool, how: str = "") -> None:
        if value != self.is_leader:
            log.warning(
                "%s %s the lease %s/%s",
                self.options.identity,
                how or ("acquired" if value else "lost"),
                self.options.namespace,
                self.options.name,
            )
        self.is_leader = value
        if self.metrics is not None:
            self.metrics.leader.set(1 if value else 0)

    async def _attempt(self, limit_seconds: float) -> bool:
        """:meth:`try_acquire_or_renew`, given up (False) after ``limit_seconds`` seconds."""
        try:
            async with asyncio.timeout(limit_seconds):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            o = self.options
            log.warning("lease %s/%s: no answer in %.3g s", o.namespace, o.name, limit_seconds)
            return False

    async def acquire(self) -> None:
        """Return once we hold the lease (tries every ``retry_period_seconds``)."""
        o = self.options
        while True:
            started = self._monotonic()
            if await self._attempt(o.renew_deadline_seconds):
                break
            await asyncio.sleep(o.retry_period_seconds)
        self._renewed_at = started
        self._held = True
        self._set_leader(True)

    async def hold(self) -> None:
        """Renew every ``retry_period_seconds``; :class:`LeadershipLost` at the renew deadline.

        The deadline runs from the start of the last successful attempt and cuts
        short an attempt still waiting for the API server when it comes.
        """
        o = self.options
        while True:
            await asyncio.sleep(o.retry_period_seconds)
            started = self._monotonic()
            left = self._renewed_at + o.renew_deadline_seconds - started
            if left > 0 and await self._attempt(left):
                self._renewed_at = started
            elif self._monotonic() >= self._renewed_at + o.renew_deadline_seconds:
                self._set_leader(False)
                raise LeadershipLost(f"no renewal for {o.renew_deadline_seconds:g} s")

    async def release(self) -> None:
        """Give the lease up (if the record still names us) so another replica takes over at once.

        Trap: not only while :attr:`is_leader`. A leader that stepped down because
        its renewals were slow (a loaded API server) is often still the Lease's
        holder; skipping the release then costs every other replica a full lease
        duration. The read below clears the record only when it still names us,
        and the patch carries its ``resourceVersion``, so a replica that took over
        meanwhile is never cleared.
        """
        if not self._held:
            return
        o = self.options
        self._set_leader(False, "releases")
        self._held = False
        try:
            async with asyncio.timeout(
                o.renew_deadline_seconds
            ):  # a hung API must not block a stop
                lease = await self._read()
                spec = (lease or {}).get("spec") or {}
                if lease is None or spec.get("holderIdentity") != o.identity:
                    return
                meta = lease.get("metadata") or {}
                patch: dict[str, Any] = {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}
                if meta.get("resourceVersion"):
                    patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
                response = await _raw(
                    self._api.patch_namespaced_lease(
                        o.name, o.namespace, patch, _preload_content=False
                    )
                )
                response.release()
        except (aiohttp.ClientError, OSError, TimeoutError, RuntimeError, ValueError) as exc:
            log.warning("releasing lease %s/%s: %r", o.namespace, o.name, exc)

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Acquire, run ``work`` while renewing, release at the end.

        Raises :class:`LeadershipLost` (after cancelling ``work`` and waiting for
        it) when renewal fails: the caller should exit and let the process
        restart as a candidate. Cancelling ``run`` cancels ``work`` too (and
        waits for it) before releasing: no work outlives its elector.
        """
        await self.acquire()
        holder = asyncio.ensure_future(self.hold())
        worker = asyncio.ensure_future(work())
        try:
            await asyncio.wait({holder, worker}, return_when=asyncio.FIRST_COMPLETED)
            if holder.done():
                worker.cancel()
                await asyncio.wait({worker})
                holder.result()  # raises LeadershipLost
            worker.result()
        finally:
            for task in (holder, worker):
                task.cancel()
            await asyncio.wait({holder, worker})
            releasing = asyncio.ensure_future(self.release())
            try:
                await asyncio.shield(releasing)  # a second cancel does not skip the release
            except asyncio.CancelledError:
                await asyncio.wait({releasing})  # bounded: release() has its own deadline
                raise  # ... nor is it swallowed
