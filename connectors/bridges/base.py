"""The seam between the bridge runner and one vendor endpoint.

The runner hands an endpoint one incident revision at a time, with what was last delivered
for it on that route; the endpoint renders, sends, and answers with a value:
:class:`Accepted` (``memo`` replaces what the ledger keeps, e.g. Slack's message ts),
:class:`Retry` (after ``after_seconds`` when the vendor said so), :class:`Rejected` (dead
letter, never a retry loop) or :class:`Skipped` (nothing a responder would see changed).

Traps: an endpoint never raises for a vendor's answer (an exception is a bug, treated as
:class:`Retry`); no secret in a reason, detail, log line or memo (PagerDuty's routing key
is in the body: never log a body; :func:`read_secret` gives a masked
:class:`~connectors.kafka.config.Secret`); revisions arrive in order but at least once (a
crash before the ledger's write sends one again: dedup keys make it harmless, Slack is told
by ``previous``). docs/bridges.md, design notes: base.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Final, Protocol, runtime_checkable
from urllib.parse import quote, quote_plus, urlsplit

import msgspec

from connectors.bounded import read_small
from connectors.kafka.config import Secret
from schemas.incidents import Incident

RequestSeconds = Annotated[
    float,
    msgspec.Meta(
        gt=0,
        le=300,
        description="One request to the vendor, connect to last byte; past it, a retry.",
    ),
]
"""Every kind's ``timeout_seconds``: one declaration of its range and meaning."""


@dataclass(frozen=True, slots=True)
class Route:
    """Which incidents go where: every non-empty filter must match (empty: any).

    ``target`` holds the endpoint's own settings for this route (``routing_key_env``,
    ``channel``, ``url_file`` ...), validated by :meth:`Endpoint.check_route`.
    """

    name: str
    severities: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()
    """Matches when any affected pod is in one of them."""
    clusters: frozenset[str] = frozenset()
    statuses: frozenset[str] = frozenset()
    target: Mapping[str, str] = field(default_factory=dict)

    def matches(self, incident: Incident) -> bool:
        if self.severities and incident.severity not in self.severities:
            return False
        if self.types and incident.type not in self.types:
            return False
        if self.clusters and incident.cluster not in self.clusters:
            return False
        if self.statuses and incident.status not in self.statuses:
            return False
        return not self.namespaces or any(p.namespace in self.namespaces for p in incident.pods)


@dataclass(frozen=True, slots=True)
class Delivered:
    """What the ledger keeps per (route, incident id): the last revision handled."""

    revision: int
    status: str
    """The incident's status at that revision (``open``/``updated``/``resolved``)."""
    memo: Mapping[str, str] = field(default_factory=dict)
    """The endpoint's facts for later revisions (never a secret)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    memo: Mapping[str, str] | None = None
    """None keeps the previous memo."""


@dataclass(frozen=True, slots=True)
class Retry:
    reason: str
    after_seconds: float | None = None
    """The vendor's ``Retry-After``, when it gave one."""


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str
    """One line: ``HTTP 400: invalid event`` (never a secret, never the body sent)."""
    detail: str = ""
    """The vendor's own error list, as it gave it (PagerDuty's ``errors``)."""


@dataclass(frozen=True, slots=True)
class Skipped:
    reason: str


Outcome = Accepted | Retry | Rejected | Skipped


@runtime_checkable
class Endpoint(Protocol):
    """One vendor. Built once per bridge process with its options and an HTTP session."""

    kind: str
    """``pagerduty``, ``slack``, ``alertmanager``, ``webhook``: metrics label, group id."""

    def check_route(self, route: Route) -> str | None:
        """None if ``route.target`` is complete for this endpoint, else a one-line error
        (shown at start-up: a route with a missing secret must stop the process there)."""
        ...

    async def deliver(
        self, incident: Incident, previous: Delivered | None, route: Route
    ) -> Outcome:
        """Send one revision (see the module for the outcomes and the traps)."""
        ...

    async def close(self) -> None:
        """Release what the endpoint holds (not the shared HTTP session)."""
        ...


@runtime_checkable
class Periodic(Protocol):
    """An endpoint with work of its own on a clock (Alertmanager re-sends firing alerts).

    The runner calls :meth:`restore` once with every ledger entry of the routes it
    serves, before the first revision, then :meth:`tick` about every ``interval_seconds``.
    A failing tick is logged and retried at the next one; it never stops the bridge.
    """

    interval_seconds: float

    def restore(self, entries: Mapping[tuple[str, str], Delivered]) -> None:
        """``(route name, incident id) -> delivered`` as read back from the ledger."""
        ...

    async def tick(self, now: float) -> None: ...


MASK: Final = "***"
"""What a secret becomes in a reason, a detail or a log line."""
CLIP: Final = "…"
"""Ends a clipped text."""
_PARTIAL_MIN: Final = 4
"""The shortest head of a secret masked at the end of a text (a read cut it there)."""


def _forms(secret: str) -> set[str]:
    """A secret as it may come back in a vendor's answer: as sent, and percent-encoded
    (a 404 page echoes the requested path encoded; a form echoes ``+`` for spaces), with
    upper- and lower-case hex digits."""
    forms = {secret, quote(secret, safe=""), quote(secret, safe="/:"), quote_plus(secret)}
    lower = {
        "%".join(
            part if i == 0 else part[:2].lower() + part[2:]
            for i, part in enumerate(form.split("%"))
        )
        for form in forms
    }
    return {f for f in forms | lower if f}


def mask(text: str, secrets: Iterable[str], cut: bool = False) -> str:
    """``text`` with every secret (and its percent-encoded forms) replaced by ``***``.

    Traps: mask *before* cutting a text to length, never after (a cut can leave half a
    secret that no longer matches); and a text that is the head of a longer answer (a
    bounded read: ``cut``) may end with the first characters of a secret, so there a
    tail of 4 or more characters that starts a secret is masked too. The longest forms
    go first, so a URL is masked whole before its path is.
    """
    forms = sorted({f for s in secrets if s for f in _forms(s)}, key=len, reverse=True)
    for form in forms:
        text = text.replace(form, MASK)
    for form in forms if cut else ():
        for n in range(min(len(form) - 1, len(text)), _PARTIAL_MIN - 1, -1):
            if text.endswith(form[:n]):
                return text[:-n] + MASK
    return text


def url_secrets(url: str) -> list[str]:
    """What of a secret URL must not appear in a text: the URL, and its path and query
    (a 404 page echoes the path it was asked for, not the whole URL). Parts shorter
    than 4 characters (a path ``/``) are not worth masking everywhere."""
    parts = urlsplit(url)
    return [v for v in (url, parts.path, parts.query) if len(v) >= _PARTIAL_MIN]


def clip(text: str, limit: int, marker: str = CLIP) -> str:
    """``text`` cut to at most ``limit`` characters, ``marker`` ending a cut one (so a
    reader sees it was cut). Mask secrets first (:func:`mask`)."""
    if len(text) <= limit:
        return text
    return text[: max(limit - len(marker), 0)] + marker[:limit]


class SecretError(ValueError):
    """A route names a secret that cannot be read (missing variable, unreadable file)."""


def read_secret(
    target: Mapping[str, str], name: str, environ: Mapping[str, str] | None = None
) -> Secret:
    """The secret ``name`` of a route: ``<name>_env`` names an environment variable,
    ``<name>_file`` a file (its content, one trailing newline stripped: Kubernetes
    Secrets mounted as files often end with one). Exactly one of the two.

    Never ``target[name]`` itself: a secret in a config file ends up in a ConfigMap, a
    ``ps`` listing or a bug report. The error names the variable or the file, never a value.

    Trap: a value with a control character (a file ending ``"\\n\\n"``, an environment
    variable set from ``echo``) or surrounding whitespace is refused here. aiohttp raises
    ``ValueError`` for a header holding a newline on *every* request, and a URL or token
    with a stray space fails as opaquely at the vendor: better one clear error at start-up.
    """
    env = os.environ if environ is None else environ
    var, path = target.get(f"{name}_env"), target.get(f"{name}_file")
    if name in target:
        raise SecretError(f"{name}: give {name}_env or {name}_file, never the secret itself")
    if (var is None) == (path is None):
        raise SecretError(f"{name}: give exactly one of {name}_env and {name}_file")
    if var is not None:
        value = env.get(var)
        if not value:
            raise SecretError(f"{name}: environment variable {var} is not set")
        return Secret(_clean(value, f"{name}: environment variable {var}"))
    assert path is not None
    try:
        text = read_small(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretError(f"{name}: cannot read {path}: {exc.__class__.__name__}") from None
    value = text[:-1] if text.endswith("\n") else text
    if not value:
        raise SecretError(f"{name}: {path} is empty")
    return Secret(_clean(value, f"{name}: {path}"))


def _clean(value: str, where: str) -> str:
    """``value``, or :class:`SecretError` naming ``where`` (never the value)."""
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise SecretError(f"{where} holds a control character (a stray newline?)")
    if value != value.strip():
        raise SecretError(f"{where} holds leading or trailing whitespace")
    return value
