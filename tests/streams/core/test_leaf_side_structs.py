"""The rare fields of the per-GPU and per-container state live in side structs
(``GpuTrack.xid``, ``ContainerTrack.crash``), None on the many GPUs and containers that
never log an XID or crash: and a snapshot written before, with those fields flat, still
restores with the same meaning (``streams.core.snapshot``), checked on what the previous
release really wrote (tests/data/snapshots/SOURCES.md)."""

from __future__ import annotations

import msgspec
import pytest

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from schemas.keys import key_of
from streams.core import Correlator
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import ContainerTrack, GpuTrack, NodeState
from tests.core_helpers import config, feed, of_type, run
from tests.factories import Cluster, term
from tests.paths import DATA
from tests.xid_lines import GSP, WARP, kmsg

MIN = 60.0
HOUR = 3600.0
CUT = 5 * HOUR + 5 * MIN
NODE = key_of("c1", "n7")
OLD_SNAPSHOT = DATA / "snapshots" / "node_state.v1-flat-xid-crash-3229e1a.msgpack"
"""Node ``n7`` at :data:`CUT` of :func:`scenario`, as commit 3229e1a (fields flat) wrote it."""


def scenario() -> tuple[list[AnyEvent], int]:
    """Events on one node whose ending depends on history kept before :data:`CUT`, and the
    number of events up to the cut: a GSP fault in five episodes two hours apart (the
    fifth pages ``xid_repeat`` only if the GPU remembers the first three), a crash loop of
    ``ft`` split by the cut (four crashes in the window: only if its first two are kept), a
    ``web`` container OOM-killed before the cut that crashes four times after it (an OOM
    kill in the window says host memory: no ``suspected_cuda_oom``, only if it is kept),
    and an application XID on an unbound GPU."""
    c = Cluster()
    c.node("n7", 0)
    for pod, uuid, bus, index in (
        ("train", "GPU-c3d4e5f6-0a1b-4c2d-8e9f-0000000000cb", "0000:cb:00.0", 1),
        ("ft", "GPU-c3d4e5f6-0a1b-4c2d-8e9f-00000000009b", "0000:9b:00.0", 2),
        ("web", "GPU-c3d4e5f6-0a1b-4c2d-8e9f-00000000001a", "0000:1a:00.0", 3),
    ):
        c.pod("n7", pod, 10)
        c.bind("n7", 20, uuid, bus, [pod], index=index)
    for episode in (1, 3, 5):
        for k in range(3):
            kmsg(c, "n7", episode * HOUR + k * MIN, GSP)
    crashes = 0
    for t in (5 * HOUR + 1 * MIN, 5 * HOUR + 3 * MIN):
        crashes += 1
        c.pod("n7", "ft", t + 2, restarts=crashes, last=term(t))
    c.pod(
        "n7",
        "web",
        5 * HOUR + 2 * MIN + 2,
        restarts=1,
        last=term(5 * HOUR + 2 * MIN, "OOMKilled", 137),
    )
    kmsg(c, "n7", 5 * HOUR + 4 * MIN, WARP)
    c.tick(CUT)
    cut = len(c.events)
    for t in (5 * HOUR + 6 * MIN, 5 * HOUR + 9 * MIN):
        crashes += 1
        c.pod("n7", "ft", t + 2, restarts=crashes, last=term(t))
    for k, t in enumerate((6, 7, 8, 10), start=2):
        at = 5 * HOUR + t * MIN
        c.pod("n7", "web", at + 2, restarts=k, last=term(at))
    for episode in (7, 9):
        for k in range(3):
            kmsg(c, "n7", episode * HOUR + k * MIN, GSP)
    return c.events, cut


def _cut(events: list[AnyEvent], cut: int) -> tuple[Correlator, list[Incident]]:
    """A correlator fed the events up to the cut, and what it published."""
    correlator = Correlator(config())
    out = [i for event in events[:cut] for i in feed(correlator, event)]
    assert correlator.pending() == 0, "nothing waits for the watermark at the cut"
    return correlator, out


def _flat(state: NodeState) -> bytes:
    """``state`` as a release with the flat fields wrote it (an imitation: the side
    structs' fields put back under their old names)."""
    raw = msgspec.msgpack.decode(encode_state(state))
    for gpu in raw["gpus"].values():
        for old, new in (("last_xid", "last"), ("last_xid_app", "app"), ("fatal", "fatal")):
            if new in gpu.get("xid", {}):
                gpu[old] = gpu["xid"][new]
        gpu.pop("xid", None)
    for pod in raw["pods"].values():
        ctrs = pod["containers"]
        for ctr in ctrs if isinstance(ctrs, list) else [ctrs]:
            ctr.update(ctr.pop("crash", {}))
    return msgspec.msgpack.encode(raw)


def test_only_the_gpus_and_containers_with_history_pay_for_a_side_struct() -> None:
    events, cut = scenario()
    state = _cut(events, cut)[0].keys[NODE]
    assert isinstance(state, NodeState)
    gpus, pods = state.gpus, state.pods
    assert [k for k, g in gpus.items() if g.xid is not None] == ["0000:cb:00.0", "0000:4c:00.0"]
    assert gpus["0000:4c:00.0"].last_xid_app
    assert not gpus["0000:cb:00.0"].last_xid_app
    assert sorted(gpus["0000:cb:00.0"].fatal or {}) == [119]
    crashed = {k: t.containers for k, t in pods.items()}
    assert isinstance(crashed["ns/train"], ContainerTrack)
    assert crashed["ns/train"].crash is None
    ft, web = crashed["ns/ft"], crashed["ns/web"]
    assert isinstance(ft, ContainerTrack)
    assert isinstance(web, ContainerTrack)
    assert len(ft.restarts) == 2
    assert ft.oom_at == -float("inf")
    assert web.restarts == ()
    assert web.oom_at > 0
    assert decode_state(encode_state(state)) == state


def test_setting_a_default_allocates_nothing_and_an_emptied_history_is_freed() -> None:
    ctr = ContainerTrack(name="main")
    ctr.restarts, ctr.cuda_log, ctr.oom_at = (), False, -float("inf")
    assert ctr.crash is None
    ctr.restarts = (1.0, 2.0)
    ctr.cuda_log = True
    assert (ctr.restarts, ctr.cuda_log) == ((1.0, 2.0), True)
    ctr.cuda_log = False
    ctr.restarts = ()  # the window passed: nothing left to keep
    assert ctr.crash is None
    gpu = GpuTrack()
    gpu.last_xid_app, gpu.fatal = False, None
    assert gpu.xid is None
    gpu.last_xid = 5.0
    assert (gpu.last_xid, gpu.last_xid_app, gpu.fatal) == (5.0, False, None)


@pytest.mark.parametrize("written_by", ["3229e1a", "imitation"])
def test_a_snapshot_with_the_flat_fields_restores_with_the_same_meaning(written_by: str) -> None:
    """Restored at the cut from the flat layout, the node goes on exactly as in one
    uninterrupted run: the fifth GSP episode pages ``xid_repeat``, ``ft``'s fourth crash
    in the window opens ``suspected_cuda_oom``, ``web``'s crashes after its OOM kill do not.
    Dropping the flat fields (what msgspec does with keys it does not know) would lose all
    three."""
    events, cut = scenario()
    whole = run(events)
    assert [i.type for i in whole if i.status == "open"] == [
        "gpu_degraded",
        "host_oom_kill",
        "gpu_app_fault",
        "suspected_cuda_oom",
        "xid_repeat",
    ]
    [cuda] = of_type(whole, "suspected_cuda_oom")
    assert [p.name for p in cuda.pods] == ["ft"]
    before, out = _cut(events, cut)
    after = Correlator(config())
    for key, state in before.keys.items():
        if key == NODE:
            assert isinstance(state, NodeState)
            old = OLD_SNAPSHOT.read_bytes() if written_by == "3229e1a" else _flat(state)
            raw = msgspec.msgpack.decode(old)
            assert "fatal" in raw["gpus"]["0000:cb:00.0"], "the flat layout"
            assert "oom_at" in raw["pods"]["ns/web"]["containers"], "the flat layout"
            restored = decode_state(old)
            assert restored == state, "the flat layout decodes into the side structs"
            after.restore(restored)
        else:
            after.restore(decode_state(encode_state(state)))
    out += [i for e in events[cut:] for i in feed(after, e)]
    out += after.flush()
    assert out == whole
