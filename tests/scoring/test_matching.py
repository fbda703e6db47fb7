"""The matching rule and the one-to-one pairing, on small hand-made incidents and truths."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from gputriage.scoring.matching import Detected, detections, fits, match, same_subject
from gputriage.scoring.metrics import confusion, percentile, shortfalls, type_scores
from schemas.incidents import GpuRef, Incident, PodInfo
from schemas.truth import ExpectedIncident

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
UUID = "GPU-aaaa"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def incident(
    id: str = "inc-1",
    type: str = "device_unhealthy_eviction",
    node: str = "n1",
    first_seen: float = 10,
    pods: tuple[str, ...] = ("ml/a",),
    gpus: tuple[str, ...] = (UUID,),
    revision: int = 1,
    **fields: Any,
) -> Incident:
    return Incident(
        id=id,
        type=type,
        status="open",
        revision=revision,
        severity="page",
        cluster="c1",
        node=node,
        gpus=tuple(GpuRef(uuid=u) for u in gpus),
        pods=tuple(PodInfo(namespace=p.split("/")[0], name=p.split("/")[1]) for p in pods),
        first_seen=at(first_seen),
        last_seen=at(first_seen),
        summary="s",
        **fields,
    )


def truth(
    id: str = "f-1",
    type: str = "device_unhealthy_eviction",
    node: str = "n1",
    start: float = 5,
    window: tuple[float, float] = (0, 60),
    pods: tuple[str, ...] = ("ml/a",),
    gpus: tuple[str, ...] = (UUID,),
    **fields: Any,
) -> ExpectedIncident:
    return ExpectedIncident(
        id=id,
        fault="fault",
        type=type,
        cluster="c1",
        node=node,
        pods=pods,
        gpus=gpus,
        start=at(start),
        not_before=at(window[0]),
        not_after=at(window[1]),
        **fields,
    )


def detected(item: Incident, published: float = 30) -> Detected:
    return Detected(item, at(published))


def test_the_rule_matches_on_every_field_it_names() -> None:
    base = truth()
    assert fits(base, incident())
    assert not fits(base, incident(type="host_oom_kill")), "type"
    assert not fits(base, incident(node="n2")), "node"
    assert not fits(base, incident(pods=("ml/b",))), "no named pod"
    assert not fits(base, incident(pods=())), "a truth naming pods needs the incident to"
    assert fits(base, incident(pods=("ml/b", "ml/a"))), "one pod in common suffices"
    assert not fits(base, incident(gpus=("GPU-bbbb",))), "GPU"
    assert not fits(base, incident(first_seen=61)), "after not_after"
    assert fits(base, incident(first_seen=60)), "the window's ends are in"
    assert not fits(truth(window=(11, 60)), incident()), "before not_before"
    assert fits(truth(pods=(), gpus=()), incident(pods=(), gpus=())), "names nothing: node"
    assert not fits(base, replace(incident(), cluster="c2")), "cluster"


def test_cluster_scoped_types_ignore_the_node_and_match_the_node_group() -> None:
    group = "eks-gpu-1"
    expected = truth(type="scale_up_failure", node="", pods=(), gpus=(), node_group=group)
    failure = incident(type="scale_up_failure", node="", pods=(), gpus=())
    assert not fits(expected, failure), "the truth names a node group the incident lacks"
    assert fits(expected, replace(failure, attributes={"node_group": group}))
    assert not fits(expected, replace(failure, attributes={"node_group": "other"}))
    starved = truth(type="gpu_pods_starved", node="", pods=("ml/a",), gpus=(), node_group=group)
    pending = incident(type="gpu_pods_starved", node="", gpus=())
    assert fits(starved, replace(pending, attributes={"node_groups": f"g0,{group}"}))
    assert not fits(starved, replace(pending, attributes={"node_groups": "g0"}))


def test_an_incident_is_its_latest_revision_published_at_its_first() -> None:
    first = incident(pods=("ml/b",))
    later = incident(pods=("ml/b", "ml/a"), revision=2)
    (item,) = detections([first, later], {"inc-1": at(20)})
    assert item.incident is later
    assert item.published == at(20)
    assert fits(truth(), item.incident), "a pod that joined later counts"


def test_one_incident_satisfies_one_truth_of_two() -> None:
    truths = [truth("f-2", start=6), truth("f-1", start=5)]
    result = match(truths, [detected(incident())])
    assert [pair.truth.id for pair in result.matched] == ["f-1"], "the earlier start wins"
    assert [t.id for t in result.misses] == ["f-2"]
    assert result.false_positives == ()
    scores = type_scores(result)["device_unhealthy_eviction"]
    assert (scores.tp, scores.fp, scores.fn) == (1, 0, 1)
    assert (scores.precision, scores.recall) == (1.0, 0.5)


def test_ties_go_by_time_then_id() -> None:
    a = detected(incident("inc-b", first_seen=10))
    b = detected(incident("inc-a", first_seen=10))
    c = detected(incident("inc-0", first_seen=11))
    result = match([truth()], [c, a, b])
    assert [pair.detected.incident.id for pair in result.matched] == ["inc-a"]
    assert [item.incident.id for item in result.false_positives] == ["inc-b", "inc-0"]


def test_the_pairing_is_maximum_not_greedy() -> None:
    """f-1 (earlier) fits both incidents, f-2 only the first: greedy would give f-1 the
    first and miss f-2; the pairing re-pairs f-1 to the second instead."""
    wide = truth("f-1", start=1, pods=("ml/a", "ml/b"))
    narrow = truth("f-2", start=2, pods=("ml/a",))
    first = detected(incident("inc-1", first_seen=10, pods=("ml/a",)))
    second = detected(incident("inc-2", first_seen=20, pods=("ml/b",)))
    result = match([narrow, wide], [second, first])
    assert {(p.truth.id, p.detected.incident.id) for p in result.matched} == {
        ("f-1", "inc-2"),
        ("f-2", "inc-1"),
    }
    assert result.misses == ()
    assert result.false_positives == ()


def test_an_optional_truth_excuses_its_incident_and_is_no_miss_when_none_came() -> None:
    """A fault due where the stream ends: the core may or may not have opened it."""
    edge = truth("f-9", optional=True)
    result = match([edge], [detected(incident())])
    assert result.matched == ()
    assert result.false_positives == ()
    assert [(p.truth.id, p.detected.incident.id) for p in result.excused] == [("f-9", "inc-1")]
    assert "device_unhealthy_eviction" not in type_scores(result), "counted neither way"
    nothing = match([edge], [])
    assert nothing.misses == ()
    assert nothing.excused == ()


def test_an_optional_truth_never_takes_an_incident_a_required_one_fits() -> None:
    """Even first in order (an earlier start), it gets only what the required truths left."""
    edge = truth("f-0", start=1, optional=True)
    required = truth("f-1", start=5)
    result = match([edge, required], [detected(incident())])
    assert [p.truth.id for p in result.matched] == ["f-1"]
    assert result.excused == ()
    assert result.misses == ()
    # The required truth fits both incidents, the optional one only the first: the
    # pairing moves the required truth to the second, and no false positive is left.
    both = truth("f-1", start=5, window=(0, 60))
    first, second = detected(incident("inc-1")), detected(incident("inc-2", first_seen=20))
    narrow = truth("f-0", start=1, window=(0, 15), optional=True)
    rerouted = match([both, narrow], [first, second])
    assert [(p.truth.id, p.detected.incident.id) for p in rerouted.matched] == [("f-1", "inc-2")]
    assert [(p.truth.id, p.detected.incident.id) for p in rerouted.excused] == [("f-0", "inc-1")]
    assert rerouted.false_positives == ()
    other = detected(incident("inc-2", type="host_oom_kill", gpus=()))
    unexcused = match([edge], [other])
    assert [i.incident.id for i in unexcused.false_positives] == ["inc-2"], "another type"


def test_a_truth_reported_as_another_type_is_a_miss_a_false_positive_and_a_confusion() -> None:
    oom = detected(incident("inc-9", type="host_oom_kill", gpus=()))
    result = match([truth()], [oom])
    assert [t.id for t in result.misses] == ["f-1"]
    assert [i.incident.id for i in result.false_positives] == ["inc-9"]
    assert [(p.truth.id, p.detected.incident.id) for p in result.confused] == [("f-1", "inc-9")]
    assert confusion(result) == {"device_unhealthy_eviction": {"host_oom_kill": 1}}
    scores = type_scores(result)
    assert scores["device_unhealthy_eviction"].recall == 0.0
    assert scores["device_unhealthy_eviction"].precision is None, "no such incident at all"
    assert scores["host_oom_kill"].precision == 0.0
    assert scores["host_oom_kill"].recall is None, "no such truth at all"


def test_confusion_needs_the_same_subject() -> None:
    expected = truth()
    assert same_subject(expected, incident(type="host_oom_kill", gpus=()))
    assert not same_subject(expected, incident(type="host_oom_kill", node="n2"))
    assert not same_subject(expected, incident(type="host_oom_kill", pods=("ml/z",)))
    assert not same_subject(expected, incident(type="host_oom_kill", first_seen=100))
    result = match([expected], [detected(incident("inc-9", type="host_oom_kill", node="n2"))])
    assert result.confused == ()
    assert confusion(result) == {
        "device_unhealthy_eviction": {"none": 1},
        "none": {"host_oom_kill": 1},
    }


def test_delays_from_start_to_first_publication_nearest_rank() -> None:
    truths = [truth(f"f-{k}", start=0, pods=(f"ml/p{k}",)) for k in range(4)]
    found = [
        detected(incident(f"inc-{k}", pods=(f"ml/p{k}",)), published=delay)
        for k, delay in enumerate((4.0, 1.0, 3.0, 2.0))
    ]
    scores = type_scores(match(truths, found))["device_unhealthy_eviction"]
    assert (scores.delay_p50_s, scores.delay_p95_s) == (2.0, 4.0)
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([float(v) for v in range(1, 21)], 95) == 19.0


@pytest.mark.parametrize(
    ("bars", "expected"),
    [
        ({"min_precision": 0.9, "min_recall": None}, []),
        ({"min_precision": None, "min_recall": 0.9}, ["recall of device_unhealthy_eviction"]),
        ({"min_precision": 1.0, "min_recall": 0.5}, []),
    ],
)
def test_shortfalls_name_the_types_below_the_bar(
    bars: dict[str, float | None], expected: list[str]
) -> None:
    result = match([truth("f-1"), truth("f-2", start=6)], [detected(incident())])
    below = shortfalls(type_scores(result), **bars)
    assert [line.rsplit(" ", 3)[0] for line in below] == expected


def test_a_null_figure_is_never_below_the_bar() -> None:
    result = match([], [detected(incident())])
    scores = type_scores(result)
    assert scores["device_unhealthy_eviction"].recall is None
    assert shortfalls(scores, min_precision=None, min_recall=1.0) == []
    assert shortfalls(scores, min_precision=0.5, min_recall=None) == [
        "precision of device_unhealthy_eviction 0.000 < 0.5"
    ]


def _most_pairs(fit: list[set[int]], incidents: int) -> int:
    """Brute force: the largest one-to-one pairing of truths to the incidents they fit."""
    best = 0
    for assignment in itertools.product(*[[None, *sorted(f)] for f in fit]):
        chosen = [a for a in assignment if a is not None]
        if len(chosen) == len(set(chosen)):
            best = max(best, len(chosen))
    assert best <= incidents
    return best


def test_the_pairing_is_as_large_as_brute_force_finds() -> None:
    """Small random instances (fixed seed): pod k of incident k fits the truths naming it."""
    rng = random.Random(15)
    for _ in range(150):
        n_incidents = rng.randint(1, 5)
        found = [detected(incident(f"inc-{k}", pods=(f"ml/p{k}",))) for k in range(n_incidents)]
        fit = [
            {k for k in range(n_incidents) if rng.random() < 0.4} for _ in range(rng.randint(1, 5))
        ]
        truths = [
            truth(f"f-{t}", start=t, pods=tuple(f"ml/p{k}" for k in sorted(f)) or ("ml/none",))
            for t, f in enumerate(fit)
        ]
        result = match(truths, found)
        assert len(result.matched) == _most_pairs(fit, n_incidents), fit
        assert all(fits(p.truth, p.detected.incident) for p in result.matched)
        ids = [p.detected.incident.id for p in result.matched]
        assert len(ids) == len(set(ids)), "one-to-one"
        assert len(result.matched) + len(result.false_positives) == n_incidents
        assert match(list(reversed(truths)), list(reversed(found))) == result, "order-free"
