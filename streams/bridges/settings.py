"""The ``[bridge]`` settings: options every bridge shares, one table per kind, routes.

``[bridge]`` holds ``min_update_seconds``, ``storm_pages``, ``storm_window_seconds`` and
``metrics_port``; ``[bridge.<kind>]`` holds the kind's own settings and its ``routes``
(an example is in docs/bridges.md, design notes: the bridge settings). Routes
(:class:`RouteSettings`) are checked when the settings load (a typo fails with its path);
the rest of a kind's table becomes the kind's ``Settings`` when that bridge starts
(:func:`kind_options`), because only then is its module imported.

Traps: a route's ``target`` holds *names* of secrets (``routing_key_env``, ``token_file``),
never values (:func:`connectors.bridges.base.read_secret` refuses a bare ``routing_key``);
route names go into metric labels and ledger keys: short, no NUL (checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec

from connectors.bridges.base import Route
from connectors.bridges.registry import modules
from connectors.prometheus import MetricsAddr, MetricsPort
from schemas.bridges import KEY_SEPARATOR
from schemas.topics import validation_text
from schemas.types import IncidentStatus, Severity

RouteName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class BridgeConfigError(ValueError):
    """A ``[bridge]`` value that cannot be used; one line naming the key (never a secret)."""


class RouteSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One route: which incidents (every non-empty filter must match) and the target."""

    name: Annotated[
        RouteName, msgspec.Meta(description="The route's name (metric labels, ledger keys).")
    ]
    severities: Annotated[
        tuple[Severity, ...], msgspec.Meta(description="Incident severities; empty: any.")
    ] = ()
    types: Annotated[tuple[str, ...], msgspec.Meta(description="Incident types; empty: any.")] = ()
    namespaces: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Namespaces of an affected pod; empty: any."),
    ] = ()
    clusters: Annotated[tuple[str, ...], msgspec.Meta(description="Clusters; empty: any.")] = ()
    statuses: Annotated[
        tuple[IncidentStatus, ...],
        msgspec.Meta(description="Incident statuses (open, updated, resolved); empty: any."),
    ] = ()
    target: Annotated[
        dict[str, str],
        msgspec.Meta(description="The endpoint's settings for this route (secrets by name)."),
    ] = {}

    def route(self) -> Route:
        return Route(
            name=self.name,
            severities=frozenset(self.severities),
            types=frozenset(self.types),
            namespaces=frozenset(self.namespaces),
            clusters=frozenset(self.clusters),
            statuses=frozenset(self.statuses),
            target=dict(self.target),
        )


class BridgeSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The validated ``[bridge]`` table (a sub-tree of :class:`gputriage.settings.Settings`)."""

    group_id: Annotated[
        str,
        msgspec.Meta(
            max_length=200,
            description="Consumer group of the bridge; empty: <processor.app_id>-bridge-<kind>.",
        ),
    ] = ""
    metrics_port: MetricsPort | None = 9470
    """``None`` (from the file) disables it; the command line can only pick a port."""
    metrics_addr: MetricsAddr = "0.0.0.0"
    min_update_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            le=86400,
            description="An incident's updates reach a route at most this often (the newest "
            "waiting one goes); open and resolved never wait.",
        ),
    ] = 30.0
    storm_pages: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=10_000,
            description="New pages per storm group and route within storm_window_seconds; "
            "further incidents of the group fold into its latest page.",
        ),
    ] = 3
    storm_window_seconds: Annotated[
        float,
        msgspec.Meta(ge=0, le=86400, description="The window storm_pages counts pages in."),
    ] = 600.0
    retry_initial_seconds: Annotated[
        float,
        msgspec.Meta(gt=0, le=86400, description="The backoff's first cap (full jitter below it)."),
    ] = 1.0
    retry_max_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=86400,
            description="The backoff's largest cap; retries never stop while the bridge runs.",
        ),
    ] = 60.0
    max_retry_after_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0, le=86400, description="The longest Retry-After honoured; a longer one is cut."
        ),
    ] = 300.0
    http_timeout_seconds: Annotated[
        float,
        msgspec.Meta(gt=0, le=86400, description="Total time of one HTTP call to a vendor."),
    ] = 30.0
    max_in_flight: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=1000,
            description="Incidents delivered at once per route (each one's revisions in order).",
        ),
    ] = 16
    max_queued: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=10_000_000,
            description="Revisions read and not done, at most: past it, fetching pauses.",
        ),
    ] = 10_000
    commit_seconds: Annotated[
        float, msgspec.Meta(gt=0, le=86400, description="How often finished offsets are committed.")
    ] = 1.0
    stop_timeout_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=86400,
            description="On SIGTERM, how long deliveries in flight may finish before the exit.",
        ),
    ] = 15.0
    session_timeout_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=86400,
            description="Consumer group session: how long a dead bridge keeps its partitions.",
        ),
    ] = 10.0
    restore_timeout_seconds: Annotated[
        float,
        msgspec.Meta(gt=0, le=86400, description="How long reading the ledger back may take."),
    ] = 120.0
    modules: Annotated[
        dict[str, str],
        msgspec.Meta(
            description="Extra kinds: name -> module with Settings (or Options) and build."
        ),
    ] = {}
    kinds: Annotated[
        dict[str, dict[str, Any]],
        msgspec.Meta(description="The [bridge.<kind>] tables as given (routes checked at load)."),
    ] = {}

    def __post_init__(self) -> None:
        known = modules(self.modules)
        for kind, table in self.kinds.items():
            if kind not in known:
                raise ValueError(
                    f"{kind}: unknown bridge kind (expected one of: {', '.join(known)})"
                )
            routes_of(self, kind, table)


COMMON: Final = tuple(name for name in BridgeSettings.__struct_fields__ if name != "kinds")
"""The keys of ``[bridge]`` itself (its fields, read off the struct); every other key is a
kind's table."""


def bridge_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[bridge]`` as written (kind tables beside the common keys) in the struct's shape."""
    given = table.get("kinds")
    if given is not None and not isinstance(given, dict):
        return dict(table)  # not a table: the conversion says so, naming bridge.kinds
    values: dict[str, Any] = {}
    kinds: dict[str, Any] = dict(given or {})
    for key, value in table.items():
        if key == "kinds":
            continue
        if key in COMMON or not isinstance(value, dict):
            values[key] = value
        else:
            kinds[key] = value
    if kinds:
        values["kinds"] = kinds
    return values


def routes_of(
    settings: BridgeSettings, kind: str, table: Mapping[str, Any] | None = None
) -> tuple[RouteSettings, ...]:
    """The routes of ``kind``, checked (``ValueError`` starting with the key's path)."""
    table = settings.kinds.get(kind, {}) if table is None else table
    raw = table.get("routes", [])
    try:
        routes = msgspec.convert(raw, tuple[RouteSettings, ...])
    except msgspec.ValidationError as exc:
        text, _, path = str(exc).rpartition(" - at `")
        if not text:
            text, path = str(exc), "$"
        unknown = text.removeprefix("Object contains unknown field ")
        if unknown != text:
            known = ", ".join(RouteSettings.__struct_fields__)
            text = f"unknown key {unknown} (expected one of: {known})"
        raise ValueError(f"{kind}.routes{path.rstrip('`')[1:]}: {text}") from None
    seen: set[str] = set()
    for index, route in enumerate(routes):
        if route.name in seen:
            raise ValueError(f"{kind}.routes[{index}].name: {route.name!r} is used twice")
        seen.add(route.name)
        if KEY_SEPARATOR in route.name:
            raise ValueError(f"{kind}.routes[{index}].name: must not hold NUL")
        for key, value in route.target.items():
            if KEY_SEPARATOR in value or KEY_SEPARATOR in key:
                raise ValueError(f"{kind}.routes[{index}].target.{key}: must not hold NUL")
    return routes


def kind_options(settings: BridgeSettings, kind: str, options_type: type[Any]) -> Any:
    """``[bridge.<kind>]`` without ``routes`` as the kind's ``Settings`` (BridgeConfigError)."""
    table = {k: v for k, v in settings.kinds.get(kind, {}).items() if k != "routes"}
    try:
        return msgspec.convert(table, options_type)
    except msgspec.ValidationError as exc:
        raise BridgeConfigError(validation_text(exc, f"bridge.{kind}")) from None


def group_id(settings: BridgeSettings, app_id: str, kind: str) -> str:
    """The bridge's consumer group: ``group_id``, or ``<app id>-bridge-<kind>``."""
    return settings.group_id or f"{app_id}-bridge-{kind}"
