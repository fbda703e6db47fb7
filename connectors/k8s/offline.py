"""Offline ingest: recorded watch streams and ``kubectl get -o json`` output to typed events.

Accepted, told apart by content, never by file name: JSON lines of watch events or of
plain objects, ``List`` objects, and pretty-printed concatenated documents. An object
without a ``kind`` takes it from its typed List's name, else from its shape
(:func:`connectors.k8s.slim.infer_kind`); one no shape decides stays an error at
``$.kind``. The live watch never infers: the API server always sends ``kind``.

Trap: pretty-printed input cannot be read line by line, so it is read whole (bounded) and
split with :func:`schemas.codec.split_documents`; one syntax error there ends the input
(no line boundary to resync on), while a document it can delimit but not accept is one bad
record. Line numbers point at the document's first line (a List item: the List's).
In full: docs/connectors.md, design notes: connectors/k8s/offline.py.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any, NamedTuple

from connectors.bounded import MAX_INPUT_BYTES, size_text
from connectors.files import FileReader
from connectors.k8s.dra import ClaimTemplate, DraJoin, TaintRule
from connectors.k8s.slim import (
    DEFAULT_CONFIG,
    WATCH_OPS,
    SlimConfig,
    Slimmed,
    infer_kind,
    slim_object,
    slim_watch_event,
)
from schemas import codec
from schemas.codec import RecordError
from schemas.events import GpuBindingEvent, PodEvent, ResourceClaimEvent, ResourceSliceEvent
from schemas.types import Op


class SlimmedRecord(NamedTuple):
    """One slimmed object of one input: where it came from and what it became."""

    source: str
    line: int
    event: Slimmed | GpuBindingEvent
    """A DRA binding only from :func:`joined`."""


def documents(source: FileReader) -> Iterator[tuple[int, Any | RecordError]]:
    """``(line, parsed JSON or RecordError)`` for each document of ``source``."""
    lines = source.lines()
    try:
        for number, raw in lines:
            if isinstance(raw, RecordError):  # over-long: still no document to tell the form
                yield number, raw
                continue
            try:
                first = codec.loads(raw)
            except RecordError:
                yield from _pretty(number, raw, lines)
                return
            yield number, first
            for later, line in lines:
                if isinstance(line, RecordError):
                    yield later, line
                    continue
                try:
                    yield later, codec.loads(line)
                except RecordError as exc:
                    yield later, exc
    except (OSError, EOFError, zlib.error) as exc:
        reason = "truncated gzip stream" if isinstance(exc, EOFError) else f"unreadable: {exc}"
        yield 0, RecordError(reason)


def _pretty(
    number: int, raw: bytes, rest: Iterator[tuple[int, bytes | RecordError]]
) -> Iterator[tuple[int, Any | RecordError]]:
    starts: list[int] = []
    numbers: list[int] = []
    parts: list[str] = []
    offset = 0
    for line_number, line in itertools.chain(((number, raw),), rest):
        if isinstance(line, RecordError) or offset + len(line) > MAX_INPUT_BYTES:
            # Held whole to be parsed: a gap or no end means no document can be trusted.
            too_big = f"pretty-printed input larger than {size_text(MAX_INPUT_BYTES)}"
            reason = line.reason if isinstance(line, RecordError) else too_big
            yield (
                line_number,
                RecordError(
                    f"{reason}; input not read (jq -c '.items[]' prints one object per line)"
                ),
            )
            return
        text = line.decode("utf-8", errors="replace")
        starts.append(offset)
        numbers.append(line_number)
        parts.append(text)
        offset += len(text) + 1
    for position, value in codec.split_documents("\n".join(parts)):
        yield numbers[bisect.bisect_right(starts, position) - 1], value


def _prefixed(result: Slimmed, prefix: str) -> Slimmed:
    if isinstance(result, RecordError) and result.field.startswith("$"):
        return RecordError(result.reason, prefix + result.field[1:])
    return result


def _kinded(obj: object, listed: str | None = None) -> object:
    """``obj`` with a kind: its own, else ``listed`` (its typed List's), else its shape's.

    A copy gets the kind (the caller's dict is never changed); an object that
    has no kind and no deciding shape gives the RecordError of :func:`infer_kind`.
    Anything not a dict is returned as it is, for slimming to report.
    """
    if not isinstance(obj, dict) or obj.get("kind") not in (None, ""):
        return obj
    kind = listed or infer_kind(obj)
    if isinstance(kind, RecordError):
        return kind
    return {**obj, "kind": kind}


def _slim(
    obj: object,
    op: Op,
    listed: str | None,
    cluster: str,
    observed: datetime | None,
    config: SlimConfig,
) -> Slimmed:
    kinded = _kinded(obj, listed)
    if isinstance(kinded, RecordError):
        return kinded
    return slim_object(kinded, op, cluster=cluster, observed=observed, config=config)


def slim_documents(
    source: FileReader,
    *,
    cluster: str,
    observed: datetime | None = None,
    config: SlimConfig = DEFAULT_CONFIG,
) -> Iterator[SlimmedRecord]:
    """Every object in ``source`` slimmed; BOOKMARKs are dropped, errors are values."""
    for line, doc in documents(source):
        if isinstance(doc, RecordError):
            yield SlimmedRecord(source.name, line, doc)
            continue
        if isinstance(doc, dict) and "type" in doc and "object" in doc:
            # Only objects of changes get a kind: a BOOKMARK's or an ERROR's never needs one.
            change = isinstance(doc["type"], str) and doc["type"] in WATCH_OPS
            kinded = _kinded(doc["object"]) if change else doc["object"]
            if isinstance(kinded, RecordError):
                result: Slimmed = kinded
            elif kinded is doc["object"]:
                result = slim_watch_event(doc, cluster=cluster, observed=observed, config=config)
            else:
                envelope = {**doc, "object": kinded}
                result = slim_watch_event(
                    envelope, cluster=cluster, observed=observed, config=config
                )
            if result is not None:
                yield SlimmedRecord(source.name, line, _prefixed(result, "$.object"))
            continue
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc["items"]
            if not isinstance(items, list):
                yield SlimmedRecord(source.name, line, RecordError("expected an array", "$.items"))
                continue
            # Items of a List carry no kind when the server elides it: take it from the
            # List (PodList -> Pod); a plain List says nothing, so their shape decides.
            item_kind = kind[: -len("List")] or None
            for index, item in enumerate(items):
                result = _slim(item, "added", item_kind, cluster, observed, config)
                yield SlimmedRecord(source.name, line, _prefixed(result, f"$.items[{index}]"))
            continue
        yield SlimmedRecord(source.name, line, _slim(doc, "added", None, cluster, observed, config))


def joined(records: Iterator[SlimmedRecord], join: DraJoin) -> Iterator[SlimmedRecord]:
    """``records`` through the DRA join, as the live connector does: pods with their claims
    resolved, slices with their effective taints, and the records the join adds (DRA
    bindings, slices a DeviceTaintRule re-emits) after the object that made them, on its
    line. Templates and rules give only what they add.

    Trap: the join sees objects in file order; a pod before its claim and template
    (``kubectl get pods,resourceclaims``) stays without GPUs: list the DRA kinds first.
    """
    for record in records:
        event = record.event
        if not isinstance(
            event, PodEvent | ResourceSliceEvent | ResourceClaimEvent | ClaimTemplate | TaintRule
        ):
            yield record
            continue
        for out in join.on(event):
            yield record._replace(event=out)
