"""Reading a ground-truth file (``truth.v1`` JSON lines, plain or gzip) all or nothing.

Unlike an event file, a truth file with one bad line is refused whole
(:class:`TruthError`, ``FILE:LINE: reason (at field)``): a score against the truth
minus that line would count whatever it expected as neither found nor missed, and
print a recall that is simply wrong. Beyond what the schema checks (types, required
fields, time zones), a line is refused when:

* a node-scoped type has no ``node``, or a cluster-scoped one has one
  (:data:`schemas.truth.CLUSTER_SCOPED`): it could never match;
* ``not_after`` is before ``not_before``: an empty window, same;
* its ``id`` repeats an earlier line's: misses are named by id, and two truths with
  one id would make the report ambiguous.
"""

from __future__ import annotations

from connectors.files import FileReader, parse_lines
from schemas.codec import RecordError
from schemas.truth import CLUSTER_SCOPED, ExpectedIncident, decode_truth


class TruthError(ValueError):
    """A truth file that cannot be scored against: one line, ``FILE:LINE: reason``."""


def read_truth(path: str) -> list[ExpectedIncident]:
    """Every expectation in ``path`` (``-`` for stdin), in file order; :class:`TruthError`
    at the first bad line, or ``OSError`` if it cannot be opened."""
    truths: list[ExpectedIncident] = []
    lines: dict[str, int] = {}
    with FileReader(path) as source:
        for number, item in parse_lines(source, _parse):
            if isinstance(item, RecordError):
                raise TruthError(_where(source.name, number, item))
            problem = _problem(item, lines)
            if problem is not None:
                raise TruthError(_where(source.name, number, problem))
            lines[item.id] = number
            truths.append(item)
    return truths


def _parse(raw: bytes) -> ExpectedIncident | RecordError:
    try:
        return decode_truth(raw)
    except RecordError as exc:
        return exc


def _problem(truth: ExpectedIncident, seen: dict[str, int]) -> RecordError | None:
    if truth.type in CLUSTER_SCOPED and truth.node:
        return RecordError(f"{truth.type} is cluster-scoped: node must be empty", "$.node")
    if truth.type not in CLUSTER_SCOPED and not truth.node:
        return RecordError(f"{truth.type} is node-scoped: node is required", "$.node")
    if truth.not_after < truth.not_before:
        return RecordError("not_after is before not_before", "$.not_after")
    if truth.id in seen:
        return RecordError(f"id {truth.id!r} repeats line {seen[truth.id]}", "$.id")
    return None


def _where(name: str, number: int, error: RecordError) -> str:
    reason = " ".join(error.reason.split()) or "invalid record"
    field = f" (at {error.field})" if error.field else ""
    return f"{name}:{number}: {reason}{field}"
