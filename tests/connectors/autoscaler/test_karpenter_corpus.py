"""Karpenter's own log lines, every generation, provider and wrapper, through ``parse_line``.

The corpus is tests/data/autoscaler/karpenter_real: 150 lines, each cited in its SOURCES.md
(98 copied from public issues and the tool's documentation, 5 real payloads in a written
wrapper, 47 built from format strings and marked so), each labelled in labels.jsonl from
what its source says it means. The figure that matters is the share of lines whose action
and reason are both right (:func:`test_action_and_reason_right_on_at_least_95_percent`);
:data:`OVERRIDES` lists every line where the parser deliberately says something else, and why.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.autoscaler import karpenter, lines
from connectors.autoscaler.lines import LineContext, parse_line
from schemas.events import AutoscalerEvent
from tests.paths import DOCS, README

DATA = Path(__file__).parents[2] / "data" / "autoscaler" / "karpenter_real"
FILES = (
    "v1_json.jsonl",
    "v03x_json.jsonl",
    "console.log",
    "wrapped.log",
    "providers.jsonl",
    "format_strings.log",
)
REFERENCE = datetime(2026, 7, 1, tzinfo=UTC)
MIN_SHARE = 0.95
LABELS = {
    (label["file"], label["line"]): label
    for label in map(json.loads, (DATA / "labels.jsonl").read_text().splitlines())
}

OVERRIDES: dict[tuple[str, int], tuple[str, str | None, str]] = {
    # cloudpilot-ai/karpenter-provider-gcp#180: the reporter cut the record down to
    # level, message and error. None of the keys that tell Karpenter's JSON from other JSON
    # (logger, controller, commit, NodeClaim) is left, so the line is read as klog, where
    # it states nothing. Telling it by "level" + "message" alone would take any zap
    # program's JSON for Karpenter's.
    ("providers.jsonl", 4): ("other", None, "a record cut to level/message/error"),
}


def _lines() -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for name in FILES:
        with (DATA / name).open(newline="") as handle:
            out.extend((name, number, raw) for number, raw in enumerate(handle, 1))
    return out


LINES = _lines()


def parse(name: str, number: int, raw: str) -> tuple[AutoscalerEvent, ...]:
    result = parse_line(raw, LineContext(cluster="c1", reference=REFERENCE, source=name), number)
    assert isinstance(result, tuple), (name, number, result)
    return result


def _reading(records: tuple[AutoscalerEvent, ...]) -> tuple[str, str | None]:
    if not records:
        return "other", None
    return records[0].action, records[0].reason or None


def test_every_line_is_labelled_and_the_corpus_is_large_enough() -> None:
    assert {(name, number) for name, number, _ in LINES} == set(LABELS)
    assert len(LINES) >= 150
    kinds = Counter(label["provenance"] for label in LABELS.values())
    assert set(kinds) == {"real", "constructed", "format-string"}
    assert kinds["real"] > kinds["format-string"] + kinds["constructed"]


def test_the_fast_path_lets_every_karpenter_key_word_through() -> None:
    """``lines.ANCHORS`` must hold :data:`karpenter.ANCHORS` (spliced in as
    ``*karpenter.ANCHORS``): without them ``parse_line`` drops ``launched machine``,
    ``deprovisioning via``, ``Cordoned node``, ``skipping, no resolved instance types`` ...
    before the Karpenter parser sees them."""
    assert set(karpenter.ANCHORS) <= set(lines.ANCHORS)


def test_action_and_reason_right_on_at_least_95_percent() -> None:
    """The corpus figure, against the labels (overrides not applied), all and real only."""
    right = Counter[str]()
    total = Counter[str]()
    misses = []
    for name, number, raw in LINES:
        label = LABELS[name, number]
        kind = label["provenance"]
        total[kind] += 1
        if _reading(parse(name, number, raw)) == (label["action"], label["reason"]):
            right[kind] += 1
        else:
            misses.append((name, number))
    share = sum(right.values()) / sum(total.values())
    real = right["real"] / total["real"]
    print(  # the figure docs/connectors.md and the README quote; run with -s to see it
        f"\nkarpenter_real: {sum(right.values())}/{sum(total.values())} lines right "
        f"({share:.3f}); real {right['real']}/{total['real']} ({real:.3f}); misses {misses}"
    )
    assert set(misses) <= set(OVERRIDES), misses
    assert share >= MIN_SHARE
    figure = (
        f"| {sum(total.values())} ({total['real']}) | {sum(right.values())}/"
        f"{sum(total.values())} (real {right['real']}/{total['real']}) |"
    )
    assert figure in (DOCS / "connectors.md").read_text(), figure  # quoted there
    short = f"| {sum(right.values())}/{sum(total.values())} action and reason right |"
    assert short in README.read_text(), short  # and in the README's summary
    assert real >= MIN_SHARE


@pytest.mark.parametrize(("name", "number", "raw"), LINES, ids=lambda v: str(v)[:40])
def test_each_line(name: str, number: int, raw: str) -> None:
    """Action and reason of every record; the NodePool and the cloud where the label has them."""
    label = LABELS[name, number]
    action, reason = label["action"], label["reason"]
    if (name, number) in OVERRIDES:
        action, reason, _why = OVERRIDES[name, number]
    records = parse(name, number, raw)
    assert _reading(records) == (action, reason)
    for record in records:
        assert (record.action, record.reason or None) == (action, reason)
        assert record.source == "karpenter"
        assert record.node_group == label["node_group"]
        assert record.cloud in ("", label["cloud"])
        assert record.line == raw.rstrip("\r\n")


def test_ids_are_deterministic_and_distinct() -> None:
    ids = [r.id for name, number, raw in LINES for r in parse(name, number, raw)]
    assert ids == [r.id for name, number, raw in LINES for r in parse(name, number, raw)]
    assert len(set(ids)) == len(ids)


def test_every_generation_of_disruption_is_a_planned_scale_down() -> None:
    """``deprovisioning via`` (v0.2x), ``disrupting via`` (v0.32-0.37), ``disrupting
    nodeclaim(s) via`` (v1.0-1.2), ``disrupting node(s)`` (v1.3+): no reason, never a fault."""
    seen = set()
    for name, number, raw in LINES:
        for word in (
            "deprovisioning via",
            "disrupting via",
            "disrupting nodeclaim(s)",
            "disrupting node(s)",
        ):
            if word in raw:
                seen.add(word)
                assert [(r.action, r.reason) for r in parse(name, number, raw)] == [
                    ("scale_down", "")
                ]
    assert len(seen) == 4


def test_a_quota_is_told_from_capacity_on_every_provider() -> None:
    """A quota hidden in Karpenter's "insufficient capacity" wrapper stays a quota on AWS
    (VcpuLimitExceeded), Azure (vCPU quota) and GCP (Quota '...' exceeded)."""
    quotas = Counter[str]()
    for name, number, raw in LINES:
        label = LABELS[name, number]
        if label["reason"] == "quota":
            (record,) = parse(name, number, raw)
            assert record.reason == "quota"
            quotas[label["cloud"]] += 1
    assert {cloud for cloud, count in quotas.items() if count} == {"aws", "azure", "gce"}


def test_wrappers_keep_the_record_time() -> None:
    """A wrapped record's time is Karpenter's own, not the wrapper's (wrapped.log L16, L21, L24)."""
    lines = (DATA / "wrapped.log").read_text().splitlines()
    times = [parse("wrapped.log", n, lines[n - 1])[0].time for n in (16, 21, 24)]
    assert times == [
        datetime(2023, 9, 28, 23, 9, 4, 961000, tzinfo=UTC),
        datetime(2026, 6, 2, 18, 2, 54, 706000, tzinfo=UTC),
        datetime(2024, 10, 4, 8, 23, 21, 354000, tzinfo=UTC),
    ]
