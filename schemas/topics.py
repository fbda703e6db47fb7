"""The topic layout as data: every topic's name, partitioning, key and configs.

One raw topic per record type (``<prefix>.raw.pods``, ``.nodes``, ``.xids``...: see
:data:`SOURCE_SCHEMAS`), keyed by correlation key (``cluster/node``, or ``cluster``);
``incidents`` (compacted, by incident id); ``dead-letters``; ``state.<app id>`` (compacted,
by key). Every raw topic has the same partition count, so one key lands on the same
partition number in each and the worker owning partition *n* owns every signal about its nodes: that
co-partitioning is what lets the processor scale out (changing the count re-homes keys: a fresh
state, not a reload).

Traps: ``retention.ms`` does nothing on a ``compact``-only topic, so the incident topic is
``compact,delete`` (plain ``compact`` for retention -1); brokers auto-create topics with default
settings, so ``ensure_topics`` creates these first; ticks have no topic; the state topic belongs to
one app id and has the raw topics' partition count. docs/operations.md, design notes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Final

import msgspec

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
    XidEvent,
)

DEFAULT_PREFIX: Final = "gputriage"
DEFAULT_PARTITIONS: Final = 6
DEFAULT_INCIDENT_RETENTION_MS: Final = 30 * 24 * 3600 * 1000

SOURCE_SCHEMAS: Final[Mapping[str, type[Event]]] = {
    "pods": PodEvent,
    "nodes": NodeEvent,
    "k8s-events": KubeEvent,
    "xids": XidEvent,
    "gpu-bindings": GpuBindingEvent,
    "topology": GpuTopologyEvent,
    "autoscaler": AutoscalerEvent,
    "resource-slices": ResourceSliceEvent,
    "resource-claims": ResourceClaimEvent,
}
"""Each source's raw topic suffix and the one schema it carries."""
SCHEMA_SOURCES: Final[Mapping[type[Event], str]] = {t: s for s, t in SOURCE_SCHEMAS.items()}

INCIDENTS: Final = "incidents"
DEAD_LETTERS: Final = "dead-letters"
NAME_KEYS: Final = (*SOURCE_SCHEMAS, INCIDENTS, DEAD_LETTERS)
"""Keys of ``[topics.names]`` (``_`` is accepted for ``-``: ``k8s_events``)."""

_LEGAL_NAME: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class TopicConfigError(ValueError):
    """A ``[topics]`` value that cannot be used; the message names the key."""


class TopicSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The validated ``[topics]`` table (a sub-tree of :class:`gputriage.settings.Settings`).

    Ranges are ``msgspec.Meta`` constraints, so a bad count fails when the
    settings are loaded, with its path; what a constraint cannot say (-1 as
    "forever", the names' keys, a legal topic name) is checked in
    ``__post_init__``, whose ``ValueError`` msgspec reports at ``$.topics``:
    each message starts with the key it is about, for the path to be completed.
    """

    prefix: str = DEFAULT_PREFIX
    partitions: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = DEFAULT_PARTITIONS
    replication_factor: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    incident_retention_ms: Annotated[int, msgspec.Meta(ge=-1, le=2**63 - 1)] = (
        DEFAULT_INCIDENT_RETENTION_MS
    )
    """How long an incident whose last revision is older is kept; -1: forever."""
    names: dict[str, str] = {}
    """Full topic names that replace ``<prefix>.<...>`` for individual topics
    (keys as in :data:`NAME_KEYS`; ``_`` is accepted for ``-``)."""

    def __post_init__(self) -> None:
        if self.incident_retention_ms == 0:
            raise ValueError("incident_retention_ms: must be positive, or -1 (forever)")
        for key in self.names:
            if key.replace("_", "-") not in NAME_KEYS:
                raise ValueError(
                    f"names.{key}: unknown topic (expected one of: {', '.join(NAME_KEYS)})"
                )
        for spec in topic_layout(self).all():
            if not _LEGAL_NAME.match(spec.name):
                raise ValueError(
                    f"topic name {spec.name!r}: only letters, digits, '.', '_' and '-', "
                    "at most 249 characters"
                )


_KEYED: Final = re.compile(r"^[a-z_][a-z0-9_.\[\]-]*: ")
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(.*)`$")
_BOUNDS: Final = ((">=", "at least"), ("<=", "at most"), (">", "more than"), ("<", "less than"))


def validation_text(exc: msgspec.ValidationError, prefix: str = "") -> str:
    """One line naming the dotted key of a settings error, from msgspec's ``- at `$.x.y```.

    The one translation of settings errors (:mod:`gputriage.settings` and the
    per-table helpers use it; it lives in ``schemas`` because that is the one
    layer every owner of a settings sub-tree may import). Traps it handles:

    * msgspec puts the path last (``Expected `int`, got `str` - at `$.topics.partitions```)
      and omits it at the root; both become ``topics.partitions: Expected ...``.
    * A ``__post_init__`` error is reported at its *struct's* path; by convention
      its message starts with the key (``names.logs: unknown topic``), which is
      appended to the path here.
    * Bounds read as words: ``Expected `int` >= 1`` is ``must be at least 1``.
    """
    text, _, path = str(exc).rpartition(" - at `")
    if not text:
        text, path = str(exc), "$"
    where = ".".join(p for p in (prefix, path.rstrip("`")[2:]) if p)
    unknown = _UNKNOWN.match(text)
    if unknown:
        return (
            f"{where}.{unknown.group(1)}: unknown key"
            if where
            else f"{unknown.group(1)}: unknown key"
        )
    if _KEYED.match(text):
        return f"{where}.{text}" if where else text
    for sign, words in _BOUNDS:
        text = re.sub(rf"Expected `(?:int|float)` {sign} (\S+)", rf"must be {words} \1", text)
    return f"{where}: {text}" if where else text


@dataclass(frozen=True)
class TopicSpec:
    """One topic: what :func:`connectors.kafka.admin.ensure_topics` creates; what its key is."""

    name: str
    partitions: int
    replication_factor: int
    key: str
    """What the record key is, for people reading the layout."""
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicLayout:
    """Every topic gputriage uses, by role."""

    raw: Mapping[str, TopicSpec]
    """Raw topics by source name (``pods``, ``nodes``, ``k8s-events``...)."""
    incidents: TopicSpec
    dead_letters: TopicSpec
    prefix: str = DEFAULT_PREFIX
    """The ``[topics] prefix`` (names of per-app topics, e.g. the state topic, start with it)."""

    def all(self) -> tuple[TopicSpec, ...]:
        """Every topic: the raw ones in source order, then incidents, then dead letters."""
        return (*self.raw.values(), self.incidents, self.dead_letters)

    def raw_topic(self, event: Event | type[Event]) -> str:
        """The raw topic for an event (or event type); ``TypeError`` for ticks and unknowns."""
        kind = event if isinstance(event, type) else type(event)
        source = SCHEMA_SOURCES.get(kind)
        if source is None:
            raise TypeError(f"{kind.__name__} records have no raw topic")
        return self.raw[source].name

    @property
    def raw_topics(self) -> tuple[str, ...]:
        """The names of the raw topics, in source order."""
        return tuple(spec.name for spec in self.raw.values())


def topic_layout(settings: TopicSettings | None = None) -> TopicLayout:
    """The layout the settings describe (defaults without settings)."""
    settings = settings or TopicSettings()
    prefix = f"{settings.prefix}." if settings.prefix else ""

    def name(key: str, default: str) -> str:
        # [topics.names] accepts k8s_events for k8s-events: look up both spellings.
        return (
            settings.names.get(key)
            or settings.names.get(key.replace("-", "_"))
            or f"{prefix}{default}"
        )

    def spec(key: str, default: str, meaning: str, **configs: str) -> TopicSpec:
        return TopicSpec(
            name=name(key, default),
            partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            key=meaning,
            configs=configs,
        )

    raw = {
        source: spec(source, f"raw.{source}", "correlation key (cluster/node or cluster)")
        for source in SOURCE_SCHEMAS
    }
    retention = settings.incident_retention_ms
    incident_configs = (
        {"cleanup.policy": "compact"}
        if retention == -1
        else {"cleanup.policy": "compact,delete", "retention.ms": str(retention)}
    )
    return TopicLayout(
        raw=raw,
        incidents=spec(INCIDENTS, INCIDENTS, "incident id", **incident_configs),
        dead_letters=spec(DEAD_LETTERS, DEAD_LETTERS, "the failed record's key"),
        prefix=settings.prefix,
    )


STATE_RECORD_MAX_BYTES = 16 << 20
"""The largest state snapshot record (one key's state): the state topic is created with
this ``max.message.bytes`` and the processors' producers allow it. The cluster key's
state grows with the cluster (~1.06 MB at 2,000 GPU nodes, measured), past
Kafka's 1 MB default, which would refuse it at every flush. Topics that exist already
are left as they are (``ensure_topics``): raise theirs by hand for big clusters."""


def state_topic(layout: TopicLayout, app_id: str) -> TopicSpec:
    """The compacted topic holding processor ``app_id``'s per-key state snapshots.

    ``<prefix>.state.<app id>``, co-partitioned with the raw topics.
    """
    raw = next(iter(layout.raw.values()))
    name = f"{layout.prefix}.state.{app_id}" if layout.prefix else f"state.{app_id}"
    if not _LEGAL_NAME.match(name):
        raise TopicConfigError(f"state topic name {name!r} is not a legal topic name")
    return TopicSpec(
        name=name,
        partitions=raw.partitions,
        replication_factor=raw.replication_factor,
        key="correlation key (cluster/node or cluster)",
        configs={"cleanup.policy": "compact", "max.message.bytes": str(STATE_RECORD_MAX_BYTES)},
    )
