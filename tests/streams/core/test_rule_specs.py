"""Every rule declares itself once (``streams.core.rules.spec``), and the declarations hold.

A rule module exports ``SPEC``: the types and default severities it emits, the events it
reads, the state fields it owns, its timer and deadline, the settings it reads. The
registry lists them; the node and cluster keys loop over it; ``CoreSettings.severity``
starts from it. These tests keep the declarations honest against the code: a rule that
reads a setting it does not declare, a state field nobody owns, a module with a ``SPEC``
that is not registered, or a type declared twice fails here.

The worked example is ``host_oom_kill`` (:mod:`streams.core.rules.oom`), whose state is a
slice of its own (``NodeState.oom``): a snapshot written before the slice existed still
restores, and its waiting ``OOMKilling`` still becomes the host-level incident on time.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import msgspec
import pytest

from schemas import native
from schemas.codec import AnyEvent
from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    XidEvent,
)
from schemas.keys import key_of
from schemas.truth import CLUSTER_SCOPED
from streams.core import CoreSettings, Correlator
from streams.core import node as node_key
from streams.core.rules import registry
from streams.core.rules.spec import ClusterRule, NodeRule, Rule
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import ClusterState, NodeState, OomState
from tests.core_helpers import config, feed, run
from tests.factories import Cluster
from tests.paths import ROOT

MIN = 60.0
RULES = ROOT / "streams" / "core" / "rules"
ENGINE_SETTINGS = frozenset(("grace_seconds", "revision_interval_seconds", "max_evidence", "xid"))
"""Settings of the engine or shared by every rule, not one rule's thresholds: the
watermark's grace, the revision interval, the evidence cap, the XID policy (each rule
reads its class), and ``severity`` (below)."""
NODE_KEY_FIELDS = frozenset(
    (
        "kind",
        "cluster",
        "node",
        "capacity",
        "allocatable",
        "resources",
        "ready",
        "sharing",
        "pods",
        "gpus",
        "incidents",
        "node_version",
        "gone",
        "deadline",
        "timers_dirty",
        "applied_time",
        "applied_rank",
        "applied_id",
        "topology",
        "gpu_buses",
        "gpu_joins",
        "disruption",
        "disruption_seen",
        "clique",
        "pool",
        "product",
    )
)
"""What the node key itself keeps (the objects as last seen, the engine's position):
facts several rules read, no rule's own memory."""
CLUSTER_KEY_FIELDS = frozenset(
    (
        "kind",
        "cluster",
        "node",
        "events",
        "incidents",
        "checked_at",
        "deadline",
        "timers_dirty",
        "applied_time",
        "applied_rank",
        "applied_id",
    )
)


def _all_rules() -> list[Rule]:
    return [*registry.NODE_RULES, *registry.CLUSTER_RULES]


def _rule_module_names() -> list[str]:
    return sorted(p.stem for p in RULES.glob("*.py") if p.stem != "__init__")


def test_every_module_that_declares_a_rule_is_registered_under_its_name() -> None:
    registered = {id(rule) for rule in _all_rules()}
    declared = []
    for name in _rule_module_names():
        module = importlib.import_module(f"streams.core.rules.{name}")
        spec = getattr(module, "SPEC", None)
        if spec is None:
            continue
        declared.append(name)
        assert id(spec) in registered, f"streams/core/rules/{name}.py: SPEC not in the registry"
        assert spec.name == name
    assert sorted(declared) == sorted(rule.name for rule in _all_rules())


def test_each_type_is_declared_once_and_the_config_starts_from_the_declarations() -> None:
    types = registry.INCIDENT_TYPES
    assert len(set(types)) == len(types), "a type emitted by two rules"
    assert list(registry.DEFAULT_SEVERITY) == list(types)
    assert CoreSettings().severity == registry.DEFAULT_SEVERITY
    assert config().severity == registry.DEFAULT_SEVERITY, "the settings' defaults too"
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", kind) for kind in types)


def test_the_truth_files_cluster_scoped_types_are_the_cluster_rules() -> None:
    """``schemas.truth`` cannot import the core (the schemas are the bottom layer): its
    copy of the cluster-scoped types is held to the registry here."""
    assert set(registry.CLUSTER_TYPES) == CLUSTER_SCOPED
    assert not set(registry.NODE_TYPES) & CLUSTER_SCOPED


def _reads_of(module: str) -> set[str]:
    """The ``CoreSettings`` fields a module's source reads (``config.x``, ``step.config.x``)."""
    fields = set(CoreSettings.__struct_fields__)
    source = (RULES / f"{module}.py").read_text()
    return {m for m in re.findall(r"config\.([a-z_]+)", source) if m in fields}


def test_a_rule_declares_every_setting_it_reads_and_only_real_ones() -> None:
    fields = set(CoreSettings.__struct_fields__)
    for rule in _all_rules():
        declared = set(rule.settings)
        assert declared <= fields, f"{rule.name}: not CoreSettings fields: {declared - fields}"
        undeclared = _reads_of(rule.name) - declared - ENGINE_SETTINGS - {"severity"}
        assert not undeclared, f"{rule.name} reads undeclared settings: {sorted(undeclared)}"


def test_every_setting_belongs_to_a_rule_or_to_the_engine() -> None:
    claimed = {s for rule in _all_rules() for s in rule.settings}
    orphans = set(CoreSettings.__struct_fields__) - claimed - ENGINE_SETTINGS - {"severity"}
    assert not orphans, f"settings no rule declares: {sorted(orphans)}"


@pytest.mark.parametrize(
    ("rules", "state", "key_fields"),
    [
        (registry.NODE_RULES, NodeState, NODE_KEY_FIELDS),
        (registry.CLUSTER_RULES, ClusterState, CLUSTER_KEY_FIELDS),
    ],
    ids=["node", "cluster"],
)
def test_every_state_field_is_one_rules_or_the_keys(
    rules: tuple[NodeRule, ...] | tuple[ClusterRule, ...],
    state: type[NodeState] | type[ClusterState],
    key_fields: frozenset[str],
) -> None:
    fields = set(state.__struct_fields__) | {"kind"}
    owners: dict[str, str] = {}
    for rule in rules:
        for name in rule.state:
            assert name in fields, f"{rule.name}: {state.__name__} has no field {name}"
            assert name not in owners, f"{name} owned by {owners[name]} and {rule.name}"
            owners[name] = rule.name
    assert not set(owners) & key_fields
    assert fields == set(owners) | key_fields, sorted(fields - set(owners) - key_fields)


def test_the_events_a_rule_reads_reach_its_key() -> None:
    node_handled = set(node_key._HANDLERS)
    cluster_handled = {PodEvent, AutoscalerEvent, KubeEvent, NodeEvent, XidEvent, GpuBindingEvent}
    for node_rule in registry.NODE_RULES:
        assert node_rule.reads, node_rule.name
        assert set(node_rule.reads) <= node_handled, node_rule.name
    for cluster_rule in registry.CLUSTER_RULES:
        assert cluster_rule.reads, cluster_rule.name
        assert set(cluster_rule.reads) <= cluster_handled, cluster_rule.name
    read = {t for rule in registry.NODE_RULES for t in rule.reads}
    assert read == node_handled, "an event type no node rule reads"


def test_timers_fire_in_the_order_they_always_did() -> None:
    """The order is part of the output (two incidents due at one instant are published in
    it): the node rules' timers in the order ``apply_timer`` named them before the
    registry, the cluster's likewise. A new rule is appended, never sorted in."""
    node = [r.name for r in registry.NODE_RULES if r.on_timer is not None]
    assert node == ["chain", "degraded", "oom", "not_ready", "xid", "watchers", "stalled"]
    assert all(r.deadline is not None for r in registry.NODE_RULES if r.on_timer is not None)
    cluster = [
        r.name for r in registry.CLUSTER_RULES if r.on_timer is not None or r.evaluate is not None
    ]
    assert cluster == ["starved", "mismatch", "fabric"]


def test_a_new_rule_module_is_compiled_without_editing_a_list(tmp_path: Path) -> None:
    rules = tmp_path / "streams" / "core" / "rules"
    rules.mkdir(parents=True)
    for name in ("__init__", "oom", "brand_new"):
        (rules / f"{name}.py").write_text("")
    assert native.rule_modules(tmp_path) == (
        "streams.core.rules.brand_new",
        "streams.core.rules.oom",
    )
    assert set(native.rule_modules()) == {f"streams.core.rules.{n}" for n in _rule_module_names()}
    assert set(native.rule_modules()) <= set(native.COMPILED)


def test_with_a_compiled_core_every_rule_module_is_compiled() -> None:
    if native.active() != "compiled (mypyc)":
        pytest.skip(f"the Python core runs ({native.forced() or 'no compiled core built'})")
    for name in _rule_module_names():
        module = sys.modules.get(f"streams.core.rules.{name}") or importlib.import_module(
            f"streams.core.rules.{name}"
        )
        assert str(module.__file__).endswith(native.ext_tail()), name


# -- the worked example: host_oom_kill's own state slice -------------------------------------
def _host_oom() -> list[AnyEvent]:
    """A node OOM kill no GPU container claims: it waits ``oom_join_seconds`` in the
    rule's slice, then becomes a host-level incident. The cut is mid-wait."""
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", "srv", 1)
    c.kube("n2", 10 * MIN, "OOMKilling", kind="Node", name="n2", message="Killed process 7 (sshd)")
    c.tick(10 * MIN + 20)  # the cut: the event applied, its 60 s not yet over
    c.pod("n2", "srv", 12 * MIN, restarts=0)
    c.tick(30 * MIN)
    return c.events


def _old_snapshot(state: NodeState) -> bytes:
    """``state`` as the previous release wrote it: the waiting events in the flat
    ``oom_pending`` field, no ``oom`` slice."""
    fields = msgspec.to_builtins(state, builtin_types=(bytes,))
    fields["oom_pending"] = fields["oom_pending"]["pending"]  # the slice's wire name
    return msgspec.msgpack.encode(fields)


def test_the_oom_rule_keeps_its_waiting_events_in_its_own_slice() -> None:
    events = _host_oom()
    correlator = Correlator(config())
    for event in events[:4]:
        feed(correlator, event)
    state = correlator.keys[key_of("c1", "n2")]
    assert isinstance(state, NodeState)
    assert isinstance(state.oom, OomState)
    [(seen, item)] = state.oom.pending
    assert (seen, item.schema) == (events[2].time.timestamp(), "k8s_event.v1")
    assert decode_state(encode_state(state)) == state
    correlator.advance_watermark(20 * MIN + events[0].time.timestamp())
    assert state.oom is None, "nothing waits: the node pays one empty slot"


OLD_SNAPSHOT = ROOT / "tests" / "data" / "snapshots" / "node_state.v1-oom-pending-9fccef3.msgpack"
"""The node key at the cut of :func:`_host_oom`, as commit 9fccef3 (before the slice) wrote
it (tests/data/snapshots/SOURCES.md)."""


@pytest.mark.parametrize("written_by", ["9fccef3", "imitation"])
def test_a_snapshot_of_the_previous_release_restores_its_waiting_oom_event(
    written_by: str,
) -> None:
    """Restored mid-wait from the old layout, the host-level incident opens exactly as in
    one uninterrupted run (same id, time, evidence): nothing is lost across the upgrade."""
    events = _host_oom()
    whole = run(events)
    assert [(i.type, i.status) for i in whole] == [
        ("host_oom_kill", "open"),
        ("host_oom_kill", "resolved"),
    ]
    assert whole[0].first_seen == events[2].time, "the OOMKilling's own time"
    before = Correlator(config())
    out = [i for e in events[:4] for i in feed(before, e)]
    assert before.pending() == 0
    after = Correlator(config())
    for key, state in before.keys.items():
        if isinstance(state, NodeState) and key == key_of("c1", "n2"):
            assert state.oom is not None
            old = OLD_SNAPSHOT.read_bytes() if written_by == "9fccef3" else _old_snapshot(state)
            assert isinstance(msgspec.msgpack.decode(old)["oom_pending"], list), "old layout"
            restored = decode_state(old)
            assert restored == state, "the old layout decodes into the slice, same meaning"
            after.restore(restored)
        else:
            after.restore(decode_state(encode_state(state)))
    out += [i for e in events[4:] for i in feed(after, e)]
    out += after.flush()
    assert out == whole
