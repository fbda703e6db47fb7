"""The engine's buffered-event entry orders exactly as the tuple it replaced.

``streams.core.engine._Pending.__lt__`` spells out tuple order field by field so that the
compiled heap compares machine values. A field added to the entry but not to ``__lt__``,
or two checks swapped, would only reorder events inside one instant: invisible to most
tests, a different incident in the few that tie.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.core.engine import _Pending

_FIELDS = st.tuples(
    st.sampled_from([-float("inf"), -0.0, 0.0, 1.5, 1e300, float("inf")]),
    st.integers(0, 3),
    st.sampled_from(["", "a", "ab", "b", "é"]),
    st.sampled_from(["", "c1", "c2"]),
    st.sampled_from(["", "n1", "n2"]),
    st.integers(0, 2),
)
"""Few values per field, so that most pairs tie on several fields in a row."""


def _entry(fields: tuple[float, int, str, str, str, int]) -> _Pending:
    return _Pending(*fields, event=None, token=None)  # type: ignore[arg-type]


@given(_FIELDS, _FIELDS)
def test_an_entry_is_less_exactly_when_its_tuple_is(
    a: tuple[float, int, str, str, str, int], b: tuple[float, int, str, str, str, int]
) -> None:
    assert (_entry(a) < _entry(b)) == (a < b)
    assert (_entry(b) < _entry(a)) == (b < a)
