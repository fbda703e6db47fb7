"""Cluster-scoped faults: autoscaler records as the connectors make them, and their truth.

The scenario runs through the real simulator (a few thousand events); the counted rule
(:class:`gputriage.simulate.cluster_truth.ClusterTruth`) is also checked on hand-made
records, where each threshold can be stepped over.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache

from connectors.autoscaler.kube_events import derive
from connectors.autoscaler.lines import LineContext, parse_line
from gputriage.simulate import FAULTS, Simulation, StreamSpec
from gputriage.simulate.cluster_truth import ClusterTruth
from schemas.codec import AnyEvent
from schemas.events import AutoscalerEvent, KubeEvent, PodEvent, PodRef
from schemas.truth import ExpectedIncident

T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
END = T0 + timedelta(hours=6)


@cache
def _run(seed: int) -> tuple[tuple[AnyEvent, ...], tuple[ExpectedIncident, ...]]:
    # Only the autoscaler's story (and noise), at a rate high enough to tell it often.
    spec = StreamSpec.for_duration(
        seconds=3 * 3600.0, nodes=20, seed=seed, fault_rate=1.0, rates=_only("scale_up", 60.0)
    )
    sim = Simulation(spec)
    events = tuple(sim.events())
    return events, tuple(sim.truth)


def _only(fault: str, rate: float) -> dict[str, float]:
    return {name: (rate if name == fault else 0.0) for name in FAULTS}


def _truth_of(kind: str, seeds: tuple[int, ...] = (1, 2, 3)) -> list[tuple[int, ExpectedIncident]]:
    return [(s, t) for s in seeds for t in _run(s)[1] if t.type == kind]


def test_the_story_gives_both_cluster_types_and_nothing_node_scoped() -> None:
    kinds = {t.type for s in (1, 2, 3) for t in _run(s)[1]}
    assert {"scale_up_failure", "gpu_pods_starved"} <= kinds
    assert not kinds - {"scale_up_failure", "gpu_pods_starved", "suspected_cuda_oom"}


def test_autoscaler_records_are_the_connectors_reading_of_their_line() -> None:
    events, _ = _run(1)
    records = [e for e in events if isinstance(e, AutoscalerEvent)]
    assert len(records) > 50
    ctx_cache: dict[str, LineContext] = {}
    for k, record in enumerate(records):
        if record.id.startswith("as-ev-"):
            continue  # derived from an Event: checked below
        ctx = ctx_cache.setdefault(
            record.cluster,
            LineContext(cluster=record.cluster, reference=record.time, cloud="aws", fmt="klog"),
        )
        again = parse_line(record.line, ctx, k)
        assert isinstance(again, tuple)
        assert again, record.line
        assert (again[0].action, again[0].node_group, again[0].reason) == (
            record.action,
            record.node_group,
            record.reason,
        )
        assert again[0].time == record.time


def test_an_autoscaler_event_is_followed_at_once_by_its_derived_record() -> None:
    events, _ = _run(2)
    pairs = 0
    for k, event in enumerate(events):
        if isinstance(event, KubeEvent) and event.source == "cluster-autoscaler":
            expected = derive(event)
            assert expected
            assert events[k + 1 : k + 1 + len(expected)] == expected
            pairs += 1
    assert pairs > 5


def test_scale_up_failure_truth_names_a_group_whose_failure_was_emitted() -> None:
    truths = _truth_of("scale_up_failure")
    assert truths
    severities = set()
    for seed, t in truths:
        events, _ = _run(seed)
        failures = [
            e
            for e in events
            if isinstance(e, AutoscalerEvent)
            and e.node_group == t.node_group
            and e.action == "scale_up_failed"
        ]
        assert any(e.time == t.start for e in failures), t
        assert t.not_before <= t.start <= t.not_after
        reasons = {e.reason for e in failures if abs((e.time - t.start).total_seconds()) < 60}
        assert t.severity == ("page" if "quota" in reasons else "ticket"), (t, reasons)
        severities.add(t.severity)
    assert severities == {"page", "ticket"}  # both kinds of failure were told


def test_starved_truth_names_pods_that_pended_unschedulable_and_were_tied() -> None:
    truths = _truth_of("gpu_pods_starved")
    assert truths
    for seed, t in truths:
        events, _ = _run(seed)
        for pod in t.pods:
            namespace, name = pod.split("/")
            records = [e for e in events if isinstance(e, PodEvent) and e.name == name]
            pending = [e for e in records if not e.node and e.phase == "Pending"]
            assert pending, pod
            assert pending[0].scheduled is not None
            assert pending[0].scheduled.reason == "Unschedulable"
            created = pending[0].created_at
            assert created is not None
            assert t.not_before <= created <= t.not_after + timedelta(seconds=1)
            ties = [
                e
                for e in events
                if isinstance(e, AutoscalerEvent)
                and e.node_group == t.node_group
                and PodRef(namespace=namespace, name=name) in e.pods
            ]
            assert ties, pod


def test_same_seed_same_cluster_story() -> None:
    spec = StreamSpec.for_duration(seconds=1800.0, nodes=10, seed=4, rates=_only("scale_up", 80))
    first, again = Simulation(spec), Simulation(spec)
    assert list(first.lines()) == list(again.lines())
    assert first.truth == again.truth


# ---------------------------------------------------------------- the counted rule


def _failure(at: datetime, group: str = "eks-gpu-p5-a", reason: str = "quota") -> AutoscalerEvent:
    return AutoscalerEvent(
        id=f"as-{at.timestamp()}-{group}",
        cluster="c",
        time=at,
        action="scale_up_failed",
        node_group=group,
        reason=reason,
    )


def _tie(at: datetime, pod: str, group: str) -> AutoscalerEvent:
    namespace, name = pod.split("/")
    return AutoscalerEvent(
        id=f"as-tie-{pod}",
        cluster="c",
        time=at,
        action="scale_up_planned",
        node_group=group,
        pods=(PodRef(namespace=namespace, name=name),),
    )


def _recorder(pods: tuple[str, ...] = ("ml/a-1",)) -> ClusterTruth:
    truth = ClusterTruth(timedelta(seconds=2))
    for pod in pods:
        truth.pending(
            cluster="c",
            pod=pod,
            owner="Job/ml/a",
            owner_label="Job/a",
            created=T0,
            at=T0,
            unschedulable=True,
        )
    return truth


def _ids(truth: ClusterTruth) -> list[str]:
    counter = iter(range(100))
    return sorted(t.type for t in truth.expected(lambda f: f"{f}-{next(counter)}", END))


def test_rule_three_attempts_and_ten_minutes_make_a_starved_pod() -> None:
    truth = _recorder()
    for minutes in (1, 6, 16):
        truth.autoscaler(_failure(T0 + timedelta(minutes=minutes)))
    found = truth.expected(lambda f: f"{f}-1", END)
    starved = [t for t in found if t.type == "gpu_pods_starved"]
    assert [t.type for t in found].count("scale_up_failure") == 1
    assert len(starved) == 1
    assert starved[0].severity == "page"
    assert starved[0].not_before <= T0 <= starved[0].not_after


def test_rule_lines_within_a_minute_are_one_attempt() -> None:
    truth = _recorder()
    for seconds in (60, 90, 100, 700):  # three lines of one attempt, then a second
        truth.autoscaler(_failure(T0 + timedelta(seconds=seconds)))
    assert _ids(truth) == ["scale_up_failure"]


def test_rule_a_pod_scheduled_before_ten_minutes_is_not_starved() -> None:
    truth = _recorder()
    for minutes in (1, 2, 4):
        truth.autoscaler(_failure(T0 + timedelta(minutes=minutes)))
    truth.left(cluster="c", pod="ml/a-1", at=T0 + timedelta(minutes=9))
    assert _ids(truth) == ["scale_up_failure"]


def test_rule_a_pod_tied_to_a_healthy_group_is_not_starved_by_another() -> None:
    truth = _recorder()
    truth.autoscaler(_tie(T0 + timedelta(seconds=5), "ml/a-1", "eks-gpu-p5-healthy"))
    for minutes in (1, 6, 16):
        truth.autoscaler(_failure(T0 + timedelta(minutes=minutes), reason="capacity"))
    assert _ids(truth) == ["scale_up_failure"]
    untied = _recorder()
    for minutes in (1, 6, 16):
        untied.autoscaler(_failure(T0 + timedelta(minutes=minutes), reason="capacity"))
    found = untied.expected(lambda f: f"{f}-1", END)
    assert sorted(t.type for t in found) == ["gpu_pods_starved", "scale_up_failure"]
    assert all(t.severity == "ticket" for t in found)


def test_rule_thirty_quiet_minutes_end_a_scale_up_failure() -> None:
    truth = ClusterTruth(timedelta(seconds=2))
    truth.autoscaler(_failure(T0))
    truth.autoscaler(_failure(T0 + timedelta(minutes=29)))
    truth.autoscaler(_failure(T0 + timedelta(minutes=29 + 31)))
    found = truth.expected(lambda f: f"{f}-1", END)
    assert [t.start for t in found] == [T0, T0 + timedelta(minutes=60)]


def test_rule_a_pod_that_would_starve_after_the_stream_ends_writes_nothing() -> None:
    truth = _recorder()
    for minutes in (1, 2, 4):
        truth.autoscaler(_failure(T0 + timedelta(minutes=minutes)))
    found = truth.expected(lambda f: f"{f}-1", T0 + timedelta(minutes=9))
    assert [t.type for t in found] == ["scale_up_failure"]
