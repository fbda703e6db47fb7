"""The one codec: msgspec for typed records, orjson for untyped JSON.

msgspec decodes straight into validated ``Struct``s (~5x orjson plus a dataclass); orjson
is the fastest general library for shapes we do not own. Every decoding failure (truncated
JSON, wrong type, unknown tag, naive timestamp, a bound of :mod:`schemas.types`) is one
:class:`RecordError` naming the field, never an exception: an escaped exception would
crash a consumer on the same record at every restart.

Traps (msgspec 0.23, orjson 3.13): deep nesting raises ``RecursionError`` near Python's
limit, even in skipped fields, at a depth that depends on the caller's stack; orjson's
output can be too deep for code that walks it; a lone surrogate is not UTF-8
(``UnicodeEncodeError``); ``Meta`` cannot bound a ``datetime``, so
:func:`try_decode_event` checks times after decoding. docs/detection.md, design notes: the
codec.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import msgspec
import msgspec.inspect
import orjson

from schemas.dead_letters import MAX_LETTER_BYTES, DeadLetter
from schemas.events import (
    AutoscalerEvent,
    Event,
    GpuBindingEvent,
    GpuTopologyEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
    Tick,
    XidEvent,
)
from schemas.incidents import Incident
from schemas.types import TIME_CEILING, TIME_FLOOR

AnyEvent = (
    PodEvent
    | NodeEvent
    | KubeEvent
    | XidEvent
    | GpuBindingEvent
    | GpuTopologyEvent
    | AutoscalerEvent
    | ResourceSliceEvent
    | ResourceClaimEvent
    | Tick
)
"""The tagged union of every event schema; the decoder picks the type by ``schema``."""

E = TypeVar("E", bound=Event)

_PATH = re.compile(r" - at `(?P<path>[^`]*)`$")


class RecordError(ValueError):
    """A record that could not be decoded: ``field`` is a JSON path such as ``$.code``."""

    def __init__(self, reason: str, field: str = "") -> None:
        self.reason = reason
        self.field = field
        super().__init__(f"{reason} (at {field})" if field else reason)


def _record_error(exc: msgspec.MsgspecError) -> RecordError:
    text = str(exc)
    match = _PATH.search(text)
    if match is None:
        return RecordError(text)
    return RecordError(text[: match.start()], match["path"])


_HOSTILE: Final = (RecursionError, UnicodeError)
"""What msgspec raises besides its own errors on a hostile record (see the module)."""


def _hostile_error(exc: RecursionError | UnicodeError) -> RecordError:
    if isinstance(exc, RecursionError):
        return RecordError("arrays or objects nested too deep to decode")
    return RecordError(f"not valid UTF-8 text: {exc}")


_DECODE_ERRORS: Final = (msgspec.MsgspecError, *_HOSTILE)
"""Everything a decode may raise on bad bytes: msgspec's own errors and :data:`_HOSTILE`."""


def _decode_error(exc: msgspec.MsgspecError | RecursionError | UnicodeError) -> RecordError:
    """The RecordError for anything in :data:`_DECODE_ERRORS`."""
    if isinstance(exc, msgspec.MsgspecError):
        return _record_error(exc)
    return _hostile_error(exc)


def _time_paths(info: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The paths to every datetime inside ``info`` (a ``msgspec.inspect`` type):
    field names, ``"[]"`` for each item of a tuple or list."""
    if isinstance(info, msgspec.inspect.DateTimeType):
        return [path]
    if isinstance(info, msgspec.inspect.UnionType):
        return [p for member in info.types for p in _time_paths(member, path)]
    if isinstance(info, msgspec.inspect.StructType):
        return [p for f in info.fields for p in _time_paths(f.type, (*path, f.name))]
    if isinstance(info, msgspec.inspect.VarTupleType | msgspec.inspect.ListType):
        return _time_paths(info.item_type, (*path, "[]"))
    return []


_EVENT_TIMES: Final = {
    member.cls: tuple(p for p in _time_paths(member, ()) if p != ("time",))
    for member in msgspec.inspect.type_info(AnyEvent).types  # type: ignore[attr-defined]
}
"""Per event type, the paths to its times other than ``time``: ``created_at``,
``containers[].terminated.finished_at``... Found from the schema, so that a time field
added later is bounded too."""


def time_problem(moment: datetime) -> str | None:
    """Why ``moment`` (aware) is not a time an event may carry, or None: before
    :data:`~schemas.types.TIME_FLOOR`, or past :data:`~schemas.types.TIME_CEILING`.
    For parsers that read times, to refuse one where it was read."""
    if moment.tzinfo is UTC:  # the common case; and no UTC datetime is past the ceiling
        if moment >= TIME_FLOOR:
            return None
    else:
        try:
            if moment.astimezone(UTC) >= TIME_FLOOR:
                return None
        except OverflowError:  # its UTC is in year 0 or 10000, where datetime cannot go
            pass
    if moment.year >= TIME_CEILING.year:
        return f"time {moment.isoformat()} is past the end of year 9999 UTC"
    return f"time {moment.isoformat()} is before the Unix epoch (1970-01-01T00:00:00Z)"


def _bad_time(value: Any, steps: tuple[str, ...]) -> tuple[str, str] | None:
    """``(why, path below value)`` of the first time under ``value`` out of range, or None.
    The path is only spelled out for a bad time: the walk is on every pod's decode."""
    if value is None:
        return None
    if not steps:
        if value.tzinfo is UTC and value >= TIME_FLOOR:
            return None
        problem = time_problem(value)
        return None if problem is None else (problem, "")
    step, rest = steps[0], steps[1:]
    if step == "[]":
        for index, item in enumerate(value):
            found = _bad_time(item, rest)
            if found is not None:
                return found[0], f"[{index}]{found[1]}"
        return None
    found = _bad_time(getattr(value, step), rest)
    return None if found is None else (found[0], f".{step}{found[1]}")


def _plain(moment: datetime | None) -> bool:
    """Absent, or UTC and in range: what almost every time is, checked in a comparison."""
    return moment is None or (moment.tzinfo is UTC and moment >= TIME_FLOOR)


def _plain_times(event: AnyEvent) -> bool:
    """Whether every time of ``event`` besides ``time`` is :func:`_plain`: the walk of
    :func:`_bad_time` written out, without a call per time, for the types that have such
    times (the walk cost a pod about a decode again; this, a fraction of one).
    ``tests/schemas`` holds it to :data:`_EVENT_TIMES`, so that a time field added to a
    schema is not left out."""
    if type(event) is PodEvent:
        for moment in (event.created_at, event.deleted_at):
            if moment is not None and (moment.tzinfo is not UTC or moment < TIME_FLOOR):
                return False
        for status in event.containers:
            for ended in (status.terminated, status.last_terminated):
                moment = None if ended is None else ended.finished_at
                if moment is not None and (moment.tzinfo is not UTC or moment < TIME_FLOOR):
                    return False
        return True
    if type(event) is AutoscalerEvent:
        return _plain(event.until)
    if type(event) is ResourceSliceEvent:
        return all(_plain(t.time_added) for d in event.devices for t in d.taints)
    if type(event) is Tick:
        return _plain(event.read_at)
    return not _EVENT_TIMES[type(event)]


_MORE_TIMES: Final = frozenset(kind for kind, paths in _EVENT_TIMES.items() if paths)
"""Event types with times besides ``time``."""


def time_error(event: AnyEvent) -> RecordError | None:
    """The RecordError for the first time of ``event`` out of range, or None.

    :func:`try_decode_event` checks this; a parser that builds events from times it
    read can call it too (:func:`checked` does).
    """
    moment = event.time
    if not _plain(moment):
        problem = time_problem(moment)
        if problem is not None:
            return RecordError(problem, "$.time")
    if _plain_times(event):
        return None
    for steps in _EVENT_TIMES[type(event)]:
        found = _bad_time(event, steps)
        if found is not None:
            return RecordError(found[0], "$" + found[1])
    return None


_event_decoder: Final = msgspec.json.Decoder(AnyEvent)
_incident_decoder: Final = msgspec.json.Decoder(Incident)
_dead_letter_decoder: Final = msgspec.json.Decoder(DeadLetter)
_encoder: Final = msgspec.json.Encoder()


def decode_event(data: bytes | str) -> AnyEvent:
    """Decode one JSON event; raise :class:`RecordError` naming the bad field."""
    event = try_decode_event(data)
    if isinstance(event, RecordError):
        raise event
    return event


def try_decode_event(data: bytes | str) -> AnyEvent | RecordError:
    """Errors as values: the decoded event, or the :class:`RecordError` that explains why not.

    Whatever the bytes, this returns: nested too deep, not UTF-8, a value past a bound,
    a time out of range are reasons like a wrong type.
    """
    try:
        event = _event_decoder.decode(data)
    except _DECODE_ERRORS as exc:
        return _decode_error(exc)
    moment = event.time
    if (
        moment.tzinfo is UTC
        and moment >= TIME_FLOOR
        and (type(event) not in _MORE_TIMES or _plain_times(event))
    ):
        return event  # the common case: UTC times in range, no error to spell out
    return time_error(event) or event


def checked(event: E) -> E | RecordError:
    """``event``, or the RecordError that decoding it would give.

    For parsers: an event built in Python is never validated (``Meta`` bounds are
    checked only when decoding), so a parser that copies a name or a number from its
    input calls this, and a value past a bound is a dead line where it was read, not a
    dead letter at the processor. Costs an encode and a decode (microseconds).
    """
    try:
        data = encode(event)
    except _HOSTILE as exc:
        return _hostile_error(exc)
    decoded = try_decode_event(data)
    return decoded if isinstance(decoded, RecordError) else event


def decode_incident(data: bytes | str) -> Incident:
    """Decode one incident revision; raise :class:`RecordError` naming the bad field."""
    try:
        return _incident_decoder.decode(data)
    except _DECODE_ERRORS as exc:
        raise _decode_error(exc) from None


def decode_dead_letter(data: bytes | str) -> DeadLetter:
    """Decode one dead-letter record (its ``key``/``value`` are base64 in JSON)."""
    try:
        return _dead_letter_decoder.decode(data)
    except _DECODE_ERRORS as exc:
        raise _decode_error(exc) from None


def encode(record: Event | Incident | msgspec.Struct) -> bytes:
    """Encode any record to compact JSON (fields in declaration order: byte-stable)."""
    return _encoder.encode(record)


def msgpack_codec(type_: Any) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """An (encode, decode) pair of compact MessagePack for internal state of ``type_``.

    For state that never leaves our own processes (the processor's state topic): it is
    about half the size of JSON and faster both ways. Records on public topics stay
    JSON (:func:`encode`), which people and other tools can read.
    """
    encoder = msgspec.msgpack.Encoder()
    decoder = msgspec.msgpack.Decoder(type_)

    def decode(data: bytes) -> Any:
        try:
            return decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise _decode_error(exc) from None

    return encoder.encode, decode


T = TypeVar("T")


def typed_decoder(type_: type[T]) -> Callable[[bytes | str], T]:
    """A JSON decoder straight into ``type_`` (a Struct, or a container of them) that raises
    :class:`RecordError` naming the field: for a module's own typed files and views.

    Build it once (at import or construction): a msgspec decoder compiles its type on
    creation, and that is most of the cost of a one-off :func:`decode_as`.
    """
    decoder = msgspec.json.Decoder(type_)

    def decode(data: bytes | str) -> T:
        try:
            return decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise _decode_error(exc) from None

    return decode


def decode_as(data: bytes | str, type_: type[T]) -> T:
    """Decode JSON into ``type_`` once (a file read at start-up); :class:`RecordError` if not.

    Hot paths build a :func:`typed_decoder` instead.
    """
    try:
        return msgspec.json.decode(data, type=type_)
    except _DECODE_ERRORS as exc:
        raise _decode_error(exc) from None


def convert_as(obj: Any, type_: type[T]) -> T:
    """Convert already-parsed JSON (dicts, lists, strings...) into ``type_``, validating as a
    decode would; :class:`RecordError` naming the field (``$.status.phase``) if not.

    For data that exists as Python objects anyway (an orjson parse other code needs too).
    When the bytes are at hand, a :func:`typed_decoder` is faster: it never builds the
    dicts. Trap: a wrong type at the top level names no field (``field`` is ``""``).
    """
    try:
        return msgspec.convert(obj, type_)
    except _DECODE_ERRORS as exc:
        raise _decode_error(exc) from None


def json_schema(type_: Any) -> dict[str, Any]:
    """The JSON Schema msgspec derives for ``type_`` (``$defs`` and all)."""
    return msgspec.json.schema(type_)


def loads(data: bytes | str) -> Any:
    """Parse untyped JSON (raw Kubernetes objects, log payloads) with orjson.

    orjson refuses more than 1,024 levels of nesting, invalid UTF-8 and lone
    surrogates (``"\\ud800"``): each is a :class:`RecordError`, never an exception.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"invalid JSON: {exc}") from None


_SCANNER: Final = json.JSONDecoder()


def split_documents(text: str) -> Iterator[tuple[int, Any]]:
    """Each JSON document of ``text`` with the offset it starts at: for input that cannot
    be read line by line (pretty-printed, concatenated documents, as ``kubectl get -w
    -o json`` prints them).

    Each document is parsed by :func:`loads`, so it is refused for exactly what a line
    would be (a lone surrogate, ``NaN``, too deep): a :class:`RecordError` for that
    document, and the next one is read. Python's ``json`` only finds where a document
    ends; a syntax error (or nesting too deep for it to follow: it recurses, and raises
    ``RecursionError``) leaves no next document to find, so the error, at the offset
    where it was found, is the last item.
    """
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return
        start = position
        try:
            _, position = _SCANNER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            yield exc.pos, RecordError(f"invalid JSON: {exc.msg}; rest of input skipped")
            return
        except RecursionError:
            yield start, RecordError("invalid JSON: nested too deep; rest of input skipped")
            return
        try:
            yield start, loads(text[start:position])
        except RecordError as exc:
            yield start, exc


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Serialise untyped data with orjson (UTC datetimes, no NaN surprises)."""
    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    return orjson.dumps(obj, option=option)


_MIN_HEAD: Final = 256


def fitted_dead_letter(letter: DeadLetter, max_bytes: int = MAX_LETTER_BYTES) -> DeadLetter:
    """``letter``, made small enough that its encoding fits in ``max_bytes``.

    Why: a dead letter must always be deliverable. The value is base64 in JSON (+33 %),
    so a raw record of ~800 KB, itself accepted by the broker, became a letter over
    the producer's 1 MB limit; the send failed with ``MessageSizeTooLargeError`` and
    the worker died on it at every restart. A letter that would not fit
    keeps the *head* of its value (what a human reads first: the schema tag, the
    first fields), the original size and a SHA-256 of the whole value; a reason or a
    key too long for the budget is cut the same way (the key is rarely the problem:
    a correlation key is short). A letter that fits is returned as it is.
    """
    data = encode(letter)
    if len(data) <= max_bytes:
        return letter
    reason = letter.reason if len(letter.reason) <= 1000 else letter.reason[:1000] + "…"
    key = letter.key
    if key is not None and len(key) > max_bytes // 8:
        key = key[: max_bytes // 8]
    value = letter.value or b""
    stub = msgspec.structs.replace(
        letter,
        reason=reason,
        key=key,
        value=b"",
        value_size=len(value),
        value_sha256=hashlib.sha256(value).hexdigest(),
    )
    room = max_bytes - len(encode(stub))
    head = max(0, room) * 3 // 4 - 4  # base64: 4 bytes of text per 3 of value, padding
    head = max(head, min(_MIN_HEAD, len(value))) if room > 0 else 0
    return msgspec.structs.replace(stub, value=value[:head])
