"""The one Retry-After parser every connector and bridge endpoint uses (RFC 9110 §10.2.3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from connectors.backoff import MAX_RETRY_AFTER_SECONDS, parse_retry_after, retry_after_seconds

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def date(offset_s: float) -> str:
    return format_datetime(NOW + timedelta(seconds=offset_s), usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        (date(90), 90.0),
        (date(-90), 0.0),  # already past: retry now
        ("Sunday, 30-Nov-26 10:01:00 GMT", 60.0),  # RFC 850, obsolete but allowed
        ("Mon Nov 30 10:00:45 2026", 45.0),  # asctime
        ("inf", None),
        ("Infinity", None),
        ("nan", None),
        ("-1", None),
        ("-0", None),
        ("+5", None),
        ("1.5", None),  # delay-seconds is digits only
        ("1e3", None),
        ("tomorrow", None),
        ("", None),
        (None, None),
        ("86400", MAX_RETRY_AFTER_SECONDS),  # a proxy's day: cut
        ("9" * 400, MAX_RETRY_AFTER_SECONDS),  # float() of this is inf
        ("9" * 5000, MAX_RETRY_AFTER_SECONDS),  # over int()'s digit limit
        (date(10 * 86400), MAX_RETRY_AFTER_SECONDS),
    ],
)
def test_retry_after_is_finite_non_negative_and_capped(
    value: str | None, expected: float | None
) -> None:
    got = parse_retry_after(value, NOW)
    assert got == expected
    assert got is None or 0.0 <= got <= MAX_RETRY_AFTER_SECONDS


def test_the_header_form_reads_the_same_parser_with_its_own_cap() -> None:
    assert retry_after_seconds({"Retry-After": "nan"}, NOW) is None
    assert retry_after_seconds({"Retry-After": "600"}, NOW, limit=60.0) == 60.0
    assert retry_after_seconds({}, NOW) is None
