"""``gputriage demo --bridge slack-stub``: what the Slack bridge would send, on the terminal.

The demo prints incident revisions as JSON lines; :class:`SlackStub` stands in for its
output stream, reads those lines back and prints, for each revision, the Web API calls
the Slack endpoint (:mod:`connectors.bridges.slack`) would make in bot mode: the parent's
``chat.postMessage`` on open, then ``chat.update`` of the parent and a reply in its thread
for every later revision (no reply when only ``last seen`` moved, none at all with
``thread_replies = false``). The payloads come from
the endpoint's own functions, so this is exactly the Block Kit JSON Slack would get (paste
one into Slack's Block Kit Builder to see it drawn). Nothing is sent anywhere: the channel
is a placeholder id and each parent's ``ts`` is made up, as Slack would return one.

Trap: the demo writes through ``write``/``flush`` only and may split a line across
writes; lines are buffered until their newline.
"""

from __future__ import annotations

import io
import json
from typing import IO, TYPE_CHECKING, Final

from connectors.bridges.slack import Call, Settings, memo_of, plan
from schemas.codec import decode_incident
from schemas.incidents import Incident

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

CHANNEL: Final = "C0DEMOCHAN"
"""A placeholder channel id (a real route names its own)."""


def calls(
    incident: Incident, memo: dict[str, str] | None, options: Settings | None = None
) -> list[Call]:
    """The endpoint's calls for one revision, given the memo the ledger would hold: the
    endpoint's own :func:`~connectors.bridges.slack.plan` (``thread_replies`` and
    ``budget_chars`` honoured)."""
    return plan(incident, memo or {}, options or Settings(), CHANNEL)


class SlackStub(io.BytesIO):
    """A binary stream that turns the incident JSON lines written to it into the Slack
    calls they would cause, pretty-printed to ``out``."""

    def __init__(self, out: IO[bytes], options: Settings | None = None) -> None:
        super().__init__()
        self._out = out
        self._options = options or Settings()
        self._pending = b""
        self._memos: dict[str, dict[str, str]] = {}
        self._posted = 0

    def write(self, data: ReadableBuffer, /) -> int:
        chunk = bytes(data)
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line.strip():
                self._show(decode_incident(line))
        return len(chunk)

    def flush(self) -> None:
        self._out.flush()

    def _show(self, incident: Incident) -> None:
        memo = self._memos.get(incident.id)
        for method, payload in calls(incident, memo, self._options):
            title = f"r{incident.revision} {incident.status} · {method} · {incident.type}"
            self._out.write(f"── {title} {'─' * max(0, 76 - len(title))}\n".encode())
            self._out.write(json.dumps(payload, indent=2, ensure_ascii=False).encode() + b"\n")
        if memo and memo.get("ts"):
            self._memos[incident.id] = memo_of(incident, memo["channel"], memo["ts"])
        else:
            self._posted += 1
            ts = f"{1764600000 + self._posted}.000100"
            self._memos[incident.id] = memo_of(incident, CHANNEL, ts)
