"""Wrappers (ca_wrapped.log, karpenter_wrapped.log; shapes and sources in SOURCES.md),
klog's missing year, the schema's backward compatibility, and arbitrary input."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.autoscaler.klog import go_time as klog_go_time
from connectors.autoscaler.klog import klog_time
from connectors.autoscaler.lines import Format, LineContext, parse_line
from connectors.autoscaler.status import GroupStatus, Status, facts, go_time
from connectors.autoscaler.unwrap import unwrap
from schemas.codec import RecordError, decode_event, encode
from schemas.events import AutoscalerEvent

DATA = Path(__file__).parents[2] / "data" / "autoscaler"
CTX = LineContext(cluster="c1", reference=datetime(2026, 7, 1, tzinfo=UTC), source="t")


def _line(name: str, number: int) -> str:
    with (DATA / name).open(newline="") as handle:
        return handle.readlines()[number - 1]


@pytest.mark.parametrize(
    ("name", "number", "wrappers", "time"),
    [
        ("ca_wrapped.log", 1, ("pod-prefix",), None),  # linode/cluster-api-provider-linode#251
        ("ca_wrapped.log", 4, ("gardener-json",), None),  # gardener/autoscaler#330
        ("ca_wrapped.log", 5, ("json-klog",), datetime(2023, 8, 23, 21, 15, 34, 994433, UTC)),
        ("ca_wrapped.log", 8, ("kubectl-prefix",), None),  # kubectl --prefix, #6128 payload
        ("ca_wrapped.log", 11, ("ts",), datetime(2023, 5, 11, 21, 29, 5, 854520, UTC)),
        (
            "ca_wrapped.log",
            12,
            ("kubectl-prefix", "ts"),
            datetime(2023, 5, 11, 21, 29, 5, 854489, UTC),
        ),
        ("ca_wrapped.log", 13, ("ts",), datetime(2026, 1, 8, 22, 7, 55, 350000, UTC)),  # TAB
        ("ca_wrapped.log", 14, ("ts",), datetime(2019, 12, 3, 10, 35, 27, 111000, UTC)),  # ": "
        ("ca_wrapped.log", 15, ("json-log",), datetime(2024, 3, 13, 12, 49, 40, 584701, UTC)),
        ("ca_wrapped.log", 17, ("cri",), datetime(2018, 12, 27, 10, 48, 23, 118301, UTC)),
        ("ca_wrapped.log", 18, ("json-log",), datetime(2020, 5, 6, 14, 23, 31, 58102, UTC)),
        ("ca_wrapped.log", 19, ("aks-diagnostics",), datetime(2018, 8, 1, 16, 2, 23, 328100, UTC)),
        ("ca_wrapped.log", 20, (), None),  # CRLF
        ("ca_wrapped.log", 23, ("name-prefix",), None),  # kubernetes/autoscaler#2557
        ("karpenter_wrapped.log", 1, ("ts",), datetime(2025, 9, 24, 3, 59, 15, 756000, UTC)),
        ("karpenter_wrapped.log", 3, ("kubectl-prefix",), None),
    ],
)
def test_each_wrapper_shape(
    name: str, number: int, wrappers: tuple[str, ...], time: datetime | None
) -> None:
    raw = _line(name, number)
    peeled = unwrap(raw)
    assert peeled.wrappers == wrappers
    assert peeled.time == time
    assert not peeled.text.endswith(("\r", "\n"))
    assert peeled.text[:1] in "IWE{" or peeled.record is not None or "Cluster" in peeled.text


def test_crlf_lines_parse_like_lf_ones() -> None:
    """ca_wrapped.log L20 is ca_klog.log... #1537's line with CRLF."""
    crlf = parse_line(_line("ca_wrapped.log", 20), CTX, 1)
    plain = parse_line(_line("ca_wrapped.log", 20).rstrip("\r\n") + "\n", CTX, 1)
    assert isinstance(crlf, tuple)
    assert isinstance(plain, tuple)
    assert [r.action for r in crlf] == [r.action for r in plain] == ["max_size_reached"]
    assert "\r" not in crlf[0].line


def test_klog_year_nearest_the_reference_across_new_year() -> None:
    january = datetime(2027, 1, 2, tzinfo=UTC)
    assert klog_time(12, 31, "23:59:59", "5", january) == datetime(
        2026, 12, 31, 23, 59, 59, 500000, UTC
    )
    assert klog_time(1, 1, "00:00:01", "", january).year == 2027  # type: ignore[union-attr]
    december = datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    assert klog_time(1, 1, "00:10:00", "", december).year == 2027  # type: ignore[union-attr]
    assert klog_time(2, 29, "00:00:00", "", datetime(2027, 3, 1, tzinfo=UTC)).year == 2028  # type: ignore[union-attr]
    assert klog_time(13, 1, "00:00:00", "", december) is None


def test_impossible_klog_date_is_a_bad_line() -> None:
    result = parse_line(
        "W1399 12:49:40.563382       1 clusterstate.go:266] Scale-up timed out for node "
        "group g after 15m",
        CTX,
        1,
    )
    assert isinstance(result, RecordError)


@pytest.mark.parametrize(
    ("line", "field", "why"),
    [
        (
            "I0701 12:00:00.000000       1 filter_out_schedulable.go:1] Pod ml/"
            + "p" * 254
            + " is unschedulable",
            "$.pods[0].name",
            "length <= 253",
        ),
        ("0001-01-01T00:00:00.5+14:00 Pod ml/x is unschedulable", "$.time", "before the Unix"),
        (
            '{"log":"Pod ml/x is unschedulable","time":"9999-12-31T23:00:00-12:00"}',
            "$.time",
            "past the end of year 9999",
        ),
    ],
    ids=["pod-name", "year-0", "year-10000"],
)
def test_a_line_whose_record_the_codec_would_refuse_is_a_bad_line(
    line: str, field: str, why: str
) -> None:
    """A dead letter where it was read, never a record the processor dead-letters."""
    result = parse_line(line, CTX, 1)
    assert isinstance(result, RecordError), result
    assert (result.field, why in result.reason) == (field, True), result


def test_a_go_time_in_year_one_east_of_utc_is_unreadable_not_an_exception() -> None:
    assert go_time("0001-01-01 00:00:00 +0100 CET") is None  # year 0 in UTC
    assert klog_go_time("0001-01-01 00:00:00.0 +0100 CET") is None  # the klog parser's too
    line = (
        "I0701 12:00:00.000000       1 static_autoscaler.go:1] Disabling scale-up for node "
        "group g until 0001-01-01 00:00:00.0 +0100 CET"
    )
    records = parse_line(line, CTX, 1)  # a backoff with no readable end: read, no raise
    assert isinstance(records, tuple), records
    assert [(r.action, r.until) for r in records] == [("backoff", None)]
    assert go_time("0001-01-01 00:00:00 +0000 UTC") == datetime(1, 1, 1, tzinfo=UTC)  # Go's zero
    observed = datetime(2026, 7, 1, tzinfo=UTC)
    status = Status(
        time=datetime(1, 1, 1, tzinfo=UTC),
        groups=(GroupStatus(name="g", health="Healthy", scale_up="Backoff"),),
        text="",
    )
    (fact,) = facts(status, "c1", observed)
    assert fact.time == observed  # a status time no event may carry: the observation's
    assert decode_event(encode(fact)) == fact


def test_a_record_of_older_releases_still_decodes() -> None:
    old = (
        b'{"schema":"autoscaler.v1","id":"a","cluster":"c","time":"2026-01-01T00:00:00Z",'
        b'"action":"scale_up_failed","node_group":"g","reason":"quota","message":"m",'
        b'"pods":[],"source":"cluster-autoscaler"}'
    )
    event = decode_event(old)
    assert isinstance(event, AutoscalerEvent)
    assert (event.size_from, event.until, event.cloud, event.line) == (None, None, "", "")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    result = parse_line(raw, CTX, 1)
    assert isinstance(result, tuple | RecordError)


_PIECES = st.sampled_from(
    [
        "I0313 12:34:34.470823       1 executor.go:147] ",
        "W1399 12:49:40.5 1 x.go:1] ",
        "[pod/a/b] ",
        "2023-05-11T21:29:05.854520117Z ",
        '{"log":"',
        '{"message":"failed launching nodeclaim","error":"',
        "Disabling scale-up for node group g until 2024-13-45 99:99:99 +9999 UTC",
        "; errorClass=Other; errorCode=",
        "Final scale-up plan: [{g 1->99999999999999999999 (max: 3)}]",
        "reason: 'NotTriggerScaleUp' ",
        "Failed adding 2 nodes (2 unseen previously) to group g due to ",
        '{"jsonPayload":{"decision":{"scaleUp":{"increasedMigs":[{"mig":',
        '"resultInfo":{"results":[{"errorMsg":{"messageId":"scale.up.error.quota.exceeded",',
        '"noDecisionStatus":{"noScaleUp":{"unhandledPodGroups":[{"rejectedMigs":[',
        '"logName":"projects/p/logs/container.googleapis.com%2Fcluster-autoscaler-visibility"',
        '{"message":"terminating due to timeout","reason":"registration_timeout",',
        "[",
        "]",
        "\r\n",
        "\x00",
        "é",
        '"}',
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=8).map("".join))
def test_arbitrary_lines_made_of_real_pieces_never_raise(raw: str) -> None:
    result = parse_line(raw, CTX, 1)
    assert isinstance(result, tuple | RecordError)
    formats: tuple[Format, ...] = ("klog", "karpenter", "gke")
    for fmt in formats:
        other = parse_line(raw, LineContext(cluster="c", reference=CTX.reference, fmt=fmt), 1)
        assert isinstance(other, tuple | RecordError)


def test_the_fast_path_anchors_cover_every_key_word() -> None:
    from connectors.autoscaler import karpenter, klog  # noqa: PLC0415
    from connectors.autoscaler.lines import ANCHORS  # noqa: PLC0415

    for word in (*klog.TRIGGERS, *karpenter.TRIGGERS):
        assert any(anchor in word for anchor in ANCHORS), word
