"""The routes' secret values, masked out of every text a bridge writes.

The endpoints take care never to put a secret in a reason, a detail or a memo; this is
the second line behind them. :func:`route_secrets` reads, once at start, every value a
route's target names (``*_env``, ``*_file``; for a secret URL also its path and query),
and :class:`Scrubber` masks them in reasons, log lines, metric labels and dead letters.

Traps:

* Values under 4 characters are never masked: masking them would mangle ordinary words.
* A file's secret is masked with and without its trailing newline (both are sent).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping

from connectors.bounded import read_small
from connectors.bridges.base import Route, mask, url_secrets


class Scrubber:
    """Masks every known secret value in a text (:func:`connectors.bridges.base.mask`: as
    sent and percent-encoded, longest first)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        return mask(text, self.secrets) if self.secrets else text

    def filter(self, record: logging.LogRecord) -> bool:
        """A ``logging`` filter: the formatted message, scrubbed (args folded in)."""
        if not self.secrets:
            return True
        message = record.getMessage()
        scrubbed = self(message)
        if record.exc_info and record.exc_text is None:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self(record.exc_text)
        if scrubbed != message or record.args:
            record.msg, record.args = scrubbed, None
        return True


def route_secrets(routes: Iterable[Route], environ: Mapping[str, str]) -> list[str]:
    """The values of every ``*_env`` / ``*_file`` a route's target names (for scrubbing)."""
    values: list[str] = []
    for route in routes:
        for key, name in route.target.items():
            found: list[str] = []
            if key.endswith("_env"):
                value = environ.get(name)
                if value:
                    found.append(value)
            elif key.endswith("_file"):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    text = read_small(name).decode("utf-8")
                    found.extend(v for v in (text, text.rstrip("\n")) if v)
            if "url" in key:  # a secret URL's path and query are secrets too
                found += [part for value in found for part in url_secrets(value.strip())]
            values.extend(found)
    return values
