"""An idle GPU with no entry (forgotten at its last idle binding) bound idle again:
``node._idle_unseen`` applies the full path's net effect (the uuid -> bus pair moved to
the end of ``gpu_joins``) without making and forgetting the entry. Compared with the full
path (:data:`streams.core.shortcuts.ENABLED` off), state and revisions byte for byte, on
histories that reach each of its guards, and across a snapshot restore in between.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import msgspec
import pytest

from schemas import native
from schemas.codec import AnyEvent
from schemas.events import GpuBindingEvent
from schemas.keys import Router
from streams.config import default_core_config
from streams.core import Correlator, shortcuts
from streams.core import node as node_rules
from streams.core.rules.gpuids import join_pairs, pack_uuid
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import NodeState
from tests.factories import Cluster
from tests.streams.core.test_differential import _on_the_sources, run

N = "gpu-node-01"
BUSES = [f"0000:{0x10 + i:02x}:00.0" for i in range(8)]
UUIDS = [f"GPU-00000000-0000-4000-8000-0000000000{i:02x}" for i in range(8)]


def _mig(ev: GpuBindingEvent, instance: int, profile: str = "1g.10gb") -> GpuBindingEvent:
    return msgspec.structs.replace(ev, gpu_instance=instance, mig_profile=profile)


def _histories() -> dict[str, list[AnyEvent]]:
    cases: dict[str, list[AnyEvent]] = {}

    def case(name: str, build: Callable[[Cluster], None]) -> None:
        c = Cluster()
        c.node(N, 0)
        build(c)
        cases[name] = c.events

    def idle_again_and_bound(c: Cluster) -> None:
        c.pod(N, "p", 1)
        for t in range(2, 8):
            c.bind(N, t, UUIDS[0], BUSES[0], [])
        c.bind(N, 10, UUIDS[0], BUSES[0], ["p"])
        c.bind(N, 11, UUIDS[0], BUSES[0], ["p"])
        c.bind(N, 12, UUIDS[0], BUSES[0], [])
        c.bind(N, 13, UUIDS[0], BUSES[0], [])

    def alternating(c: Cluster) -> None:
        # Three idle GPUs in turn: each binding moves its pair to the end.
        for t in range(2, 20):
            i = t % 3
            c.bind(N, t, UUIDS[i], BUSES[i], [], pods_known=t % 2 == 0)
        c.bind(N, 21, UUIDS[1], BUSES[1], [])

    def reseated(c: Cluster) -> None:
        c.bind(N, 2, UUIDS[0], BUSES[0], [])
        c.bind(N, 3, UUIDS[0], BUSES[1], [])  # the same uuid at another bus
        c.bind(N, 4, UUIDS[0], BUSES[1], [])
        c.bind(N, 5, UUIDS[0], BUSES[0], [])

    def another_entry_carries_the_uuid(c: Cluster) -> None:
        c.pod(N, "p", 1)
        c.bind(N, 2, UUIDS[0], BUSES[0], ["p"])  # the whole GPU, bound
        c.events.append(_mig(c.bind(N, 3, UUIDS[0], BUSES[0], []), 1))
        c.events.pop(-2)
        c.events.append(_mig(c.bind(N, 4, UUIDS[0], BUSES[0], []), 1))
        c.events.pop(-2)

    def mig_instances(c: Cluster) -> None:
        c.pod(N, "p", 1)
        for t, gi in ((2, 1), (3, 2), (4, 1), (5, 2)):
            c.events.append(_mig(c.bind(N, t, UUIDS[0], BUSES[0], []), gi, f"{gi}g.10gb"))
            c.events.pop(-2)
        c.events.append(_mig(c.bind(N, 6, UUIDS[0], BUSES[0], ["p"]), 1))
        c.events.pop(-2)

    def keyed_by_uuid_first(c: Cluster) -> None:
        # dcgm-exporter's MIG binding: the parent's uuid, no bus id (an entry keyed by
        # uuid, its profile under that key), then NVML's idle identity with the bus.
        c.pod(N, "p", 1)
        c.events.append(_mig(c.bind(N, 2, UUIDS[0], "", ["p"]), 3))
        c.events.pop(-2)
        c.bind(N, 3, UUIDS[0], BUSES[0], [])  # the whole GPU, idle: its instance moves
        c.bind(N, 4, UUIDS[0], BUSES[0], [])
        c.events.append(_mig(c.bind(N, 5, UUIDS[1], "", []), 2))
        c.events.pop(-2)
        c.events.append(_mig(c.bind(N, 6, UUIDS[1], BUSES[1], []), 2, "3g.40gb"))
        c.events.pop(-2)
        c.bind(N, 7, UUIDS[2], BUSES[2], [])

    def recent_xid(c: Cluster) -> None:
        c.pod(N, "p", 1)
        c.bind(N, 2, UUIDS[0], BUSES[0], [])
        c.xid(N, 3, 31, bus=BUSES[0])
        c.bind(N, 4, UUIDS[0], BUSES[0], [])
        c.bind(N, 4000, UUIDS[0], BUSES[0], [])
        c.bind(N, 4001, UUIDS[0], BUSES[0], [])

    def uuid_or_bus_alone(c: Cluster) -> None:
        c.bind(N, 2, "", BUSES[0], [])
        c.bind(N, 3, UUIDS[0], "", [])
        c.bind(N, 4, UUIDS[0], BUSES[0], [])
        c.bind(N, 5, UUIDS[0], "", [])

    def many_gpus(c: Cluster) -> None:
        # More idle GPUs than pairs kept: the oldest pairs go, as on the full path.
        uuids = [f"GPU-00000000-0000-4000-8000-000000000{i:03x}" for i in range(70)]
        buses = [f"0000:{i:02x}:00.0" for i in range(70)]
        for t in range(2, 150):
            i = (t * 7) % 70
            c.bind(N, t, uuids[i], buses[i], [])

    def odd_spellings(c: Cluster) -> None:
        c.bind(N, 2, "GPU-NOT-A-UUID", BUSES[0], [])
        c.bind(N, 3, "GPU-NOT-A-UUID", BUSES[0], [])
        # Bus ids no source writes (the factory canonicalises, so they are put in place).
        for t, (uuid, bus) in enumerate(
            [(UUIDS[1], "unknown"), (UUIDS[2], "uuid:x"), (UUIDS[3], "x" * 300)] * 2
        ):
            ev = c.bind(N, 4 + t, uuid, BUSES[7], [])
            c.events[-1] = msgspec.structs.replace(ev, pci_bus_id=bus)

    def topology_told_first(c: Cluster) -> None:
        c.topology(N, 1, {}, uuids=tuple(UUIDS[:2]), buses=tuple(BUSES[:2]))
        c.bind(N, 2, UUIDS[0], BUSES[0], [])
        c.bind(N, 3, UUIDS[1], BUSES[1], [])
        c.bind(N, 4, UUIDS[0], BUSES[0], [])

    case("idle again and again, then bound, then idle", idle_again_and_bound)
    case("idle GPUs in turn, pods known or not", alternating)
    case("an idle GPU re-seated at another bus", reseated)
    case("an idle MIG instance of a bound GPU", another_entry_carries_the_uuid)
    case("idle MIG instances with profiles", mig_instances)
    case("an entry keyed by uuid first", keyed_by_uuid_first)
    case("an idle GPU with a recent XID", recent_xid)
    case("a binding naming the uuid or the bus alone", uuid_or_bus_alone)
    case("more idle GPUs than pairs kept", many_gpus)
    case("odd uuids and bus ids", odd_spellings)
    case("a topology told the joins first", topology_told_first)
    return cases


HISTORIES = _histories()


@pytest.mark.parametrize("name", HISTORIES)
def test_an_idle_binding_leaves_what_the_full_path_leaves(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = run(HISTORIES[name])
    monkeypatch.setattr(shortcuts, "ENABLED", False)
    assert run(HISTORIES[name]) == fast


def _restored_midway(events: list[AnyEvent]) -> tuple[list[bytes], bytes]:
    """The history fed in two halves, every key snapshotted and restored into a new
    correlator between them (a restart)."""
    half = len(events) // 2
    first = Correlator(default_core_config())
    router = Router()
    for ev in events[:half]:
        for routed in router.route(ev):
            first.ingest(routed)
    first.flush()
    second = Correlator(default_core_config())
    for state in first.keys.values():
        second.restore(decode_state(encode_state(state)))
    out: list[bytes] = []
    for ev in events[half:]:
        for routed in router.route(ev):
            out.extend(msgspec.json.encode(i) for i in second.ingest(routed))
    out.extend(msgspec.json.encode(i) for i in second.flush())
    node = second.keys[f"c1/{N}"]
    assert isinstance(node, NodeState)
    return out, msgspec.msgpack.encode((node.gpu_joins, sorted(node.gpus)))


@pytest.mark.parametrize(
    "name",
    [
        "idle again and again, then bound, then idle",
        "idle GPUs in turn, pods known or not",
        "an idle GPU re-seated at another bus",
        "an entry keyed by uuid first",
    ],
)
def test_a_restore_between_idle_bindings_changes_nothing(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = HISTORIES[name]
    fast = _restored_midway(events)
    monkeypatch.setattr(shortcuts, "ENABLED", False)
    assert _restored_midway(events) == fast


def test_the_idle_shortcut_fires_and_moves_the_pair_last() -> None:
    """Without this the comparisons above could pass with a shortcut that never fires."""
    c = Cluster()
    c.node(N, 0)
    c.bind(N, 1, UUIDS[0], BUSES[0], [])
    c.bind(N, 2, UUIDS[1], BUSES[1], [])
    correlator = Correlator(default_core_config())
    for ev in c.events:
        correlator.ingest(ev)
    correlator.flush()
    state = correlator.keys[f"c1/{N}"]
    assert isinstance(state, NodeState)
    assert state.gpus == {}
    assert join_pairs(state.gpu_joins) == [
        (pack_uuid(UUIDS[0]), BUSES[0]),
        (pack_uuid(UUIDS[1]), BUSES[1]),
    ]
    again = c.bind(N, 3, UUIDS[0], BUSES[0], [])
    assert node_rules._idle_unseen(state, again) == BUSES[0]
    assert join_pairs(state.gpu_joins) == [
        (pack_uuid(UUIDS[1]), BUSES[1]),
        (pack_uuid(UUIDS[0]), BUSES[0]),
    ]
    bound = c.bind(N, 4, UUIDS[0], BUSES[0], ["p"])
    assert node_rules._idle_unseen(state, bound) == ""


_DIGESTS = """
import hashlib
from schemas import native
from tests.streams.core.test_differential import run
from tests.streams.core.test_idle_bindings import HISTORIES
for name, events in HISTORIES.items():
    revisions, state = run(events)
    print(hashlib.sha256(b"".join(revisions) + state).hexdigest())
print(native.active().replace(" ", "_"))
"""


def test_the_compiled_core_leaves_what_the_sources_leave() -> None:
    """The same histories on the Python sources (a subprocess): the same revisions and
    the same state, when this interpreter runs the compiled core."""
    if native.active() != "compiled (mypyc)":
        pytest.skip("this interpreter runs the Python core: nothing to compare")
    here = []
    for events in HISTORIES.values():
        revisions, state = run(events)
        here.append(hashlib.sha256(b"".join(revisions) + state).hexdigest())
    assert _on_the_sources(_DIGESTS) == [*here, "Python"]
