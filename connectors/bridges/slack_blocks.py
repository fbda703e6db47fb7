"""Slack Block Kit for one incident: the parent message, the thread reply, their limits.

Pure: no I/O, no clock. :mod:`connectors.bridges.slack` sends what this renders;
``gputriage demo --bridge slack-stub`` prints it.

Traps: besides each block's limits Slack rejects a message whose blocks together are too
long (``msg_blocks_too_long``, undocumented, about 12-13k characters), so every text is
counted against one budget (:data:`DEFAULT_BUDGET`) and clipped with a marker, never
dropped silently. Untrusted text must neither mention nor format: :func:`escape` sends
only ``&``, ``<``, ``>`` as entities, prose goes in ``plain_text``, names in code spans,
and text with a backtick is never put in one (it would close the span). ``link_names`` is
never set and unfurling is off. The layout, limits and sources:
docs/bridges.md, design notes: slack_blocks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from schemas.incidents import Evidence, GpuRef, Incident, PodInfo

MAX_BLOCKS: Final = 50
MAX_SECTION_TEXT: Final = 3000
MAX_HEADER_TEXT: Final = 150
MAX_FIELDS: Final = 10
MAX_FIELD_TEXT: Final = 2000
MAX_CONTEXT_ELEMENTS: Final = 10
DEFAULT_BUDGET: Final = 10_000
"""Characters of text in all blocks of one message: a margin under the ~12,000 where
Slack starts answering ``msg_blocks_too_long`` (undocumented, see above; Slack counts
some structure too: a divider alone moved the measured threshold). The endpoint's
``budget_chars`` may raise it to 11,000 at most."""
MAX_FALLBACK_TEXT: Final = 300
MARK: Final = "…"
"""Ends a clipped text."""
PODS_IN_FIELD: Final = 3
"""Pods named in the Pods field; more get a section of their own."""

SEVERITY_BADGE: Final = {"page": "🔴 PAGE", "ticket": "🟠 TICKET", "info": "🔵 INFO"}
RESOLVED_BADGE: Final = "✅ RESOLVED"

Block = dict[str, Any]
"""One Block Kit block, as JSON."""


# -- escaping and clipping -----------------------------------------------------------------
def escape(text: str) -> str:
    """Slack's three control characters as entities, and nothing else (``&`` first)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(raw: str, limit: int) -> str:
    """``raw`` escaped, at most ``limit`` characters, ending in :data:`MARK` when cut.

    Cut on the raw text, so an entity (``&lt;``) is never split in two."""
    escaped = escape(raw)
    if len(escaped) <= limit:
        return escaped
    room = max(limit - len(MARK), 0)
    out: list[str] = []
    used = 0
    for char in raw:
        piece = escape(char)
        if used + len(piece) > room:
            break
        out.append(piece)
        used += len(piece)
    return "".join(out) + MARK if limit >= len(MARK) else "".join(out)


def spannable(raw: str) -> bool:
    """Whether ``raw`` can sit in a code span and stay literal: no backtick (it would close
    the span), no line break (a span is one line), not empty (```` `` ```` is no span)."""
    return bool(raw) and "`" not in raw and "\n" not in raw and "\r" not in raw


def plain(raw: str, limit: int) -> dict[str, Any]:
    """A ``plain_text`` object: never parsed for mentions or formatting; emoji codes off
    (a ``:fire:`` in a pod name stays text)."""
    return {"type": "plain_text", "text": clip(raw, limit), "emoji": False}


def mrkdwn(text: str) -> dict[str, Any]:
    """A ``mrkdwn`` object from text already escaped/assembled here (never raw input)."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def field_text(label: str, raw: str, limit: int = MAX_FIELD_TEXT) -> dict[str, Any]:
    """``*Label*`` and the value in a code span, or all ``plain_text`` when the value
    cannot be spanned (see :func:`spannable`)."""
    if not raw or raw == "-":
        return mrkdwn(f"*{label}*\n-")
    if spannable(raw):
        head = f"*{label}*\n`"
        return mrkdwn(f"{head}{clip(raw, limit - len(head) - 1)}`")
    return plain(f"{label}: {raw}", limit)


def text_chars(obj: Any) -> int:
    """The text in a block (or list of blocks): the sum of every ``text`` string, which is
    what the budget counts."""
    if isinstance(obj, dict):
        return sum(
            len(v) if k == "text" and isinstance(v, str) else text_chars(v) for k, v in obj.items()
        )
    if isinstance(obj, list):
        return sum(text_chars(v) for v in obj)
    return 0


# -- labels --------------------------------------------------------------------------------
def utc(value: datetime | None) -> str:
    """``2026-12-01 17:12:23Z``: UTC whatever offset the record had."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def gpu_label(gpu: GpuRef) -> str:
    name = gpu.pci_bus_id or gpu.uuid or (f"#{gpu.index}" if gpu.index is not None else "?")
    if gpu.gpu_instance is not None:
        name += f" GI {gpu.gpu_instance}"
        if gpu.mig_profile:
            name += f" ({gpu.mig_profile})"
    return name


def pod_label(pod: PodInfo) -> str:
    role = f" ({pod.role})" if pod.role else ""
    return f"{pod.namespace}/{pod.name}{role}"


def owners(pods: Sequence[PodInfo]) -> list[str]:
    seen: dict[str, None] = {}
    for pod in pods:
        if pod.owner_kind or pod.owner_name:
            seen.setdefault(f"{pod.namespace}/{pod.owner_kind}/{pod.owner_name}", None)
    return list(seen)


def listed(labels: Sequence[str], shown: int) -> str:
    """The first ``shown`` labels, then ``+N more``."""
    if not labels:
        return "-"
    rest = len(labels) - shown
    head = ", ".join(labels[:shown])
    return f"{head} +{rest} more" if rest > 0 else head


def evidence_line(ev: Evidence) -> str:
    return f"{ev.time.astimezone(UTC).strftime('%H:%M:%S')} {' '.join(ev.text.split())}"


def badge(incident: Incident) -> str:
    if incident.status == "resolved":
        return f"{RESOLVED_BADGE} ({incident.severity})"
    return SEVERITY_BADGE.get(incident.severity, incident.severity.upper())


# -- the budget ----------------------------------------------------------------------------
@dataclass
class Budget:
    """Characters and blocks left for one message."""

    chars: int
    blocks: int = MAX_BLOCKS

    def spend(self, blocks: Sequence[Block]) -> None:
        self.chars -= text_chars(list(blocks))
        self.blocks -= len(blocks)


NOTE_ROOM: Final = 60
"""Characters kept back for the ``… N more not shown`` note, so it always fits."""


def _section(title: str, lines: Sequence[str], as_code: bool) -> Block:
    """One section of ``lines`` under ``title``, unclipped (the caller sizes it)."""
    if as_code:
        body = "\n".join(escape(line) for line in lines)
        text = f"*{escape(title)}*\n```\n{body}\n```" if lines else f"*{escape(title)}*"
        return {"type": "section", "text": mrkdwn(text)}
    raw = "\n".join([title, *lines])
    return {"type": "section", "text": {"type": "plain_text", "text": escape(raw), "emoji": False}}


def literal_sections(
    title: str, lines: Sequence[str], budget: Budget, omitted: int = 0
) -> list[Block]:
    """``lines`` under ``title`` in as few sections as fit the budget (and 3000 characters
    each); what does not fit is counted in a closing ``… N more not shown`` note, with
    ``omitted`` (left out upstream) added. Spends from ``budget``.

    Each section is a mrkdwn code block when no line has a backtick, else ``plain_text``
    (a backtick in a code block would end it early: see the module)."""
    as_code = all("`" not in line for line in lines) and "`" not in title
    blocks: list[Block] = []
    chunk: list[str] = []
    shown = 0
    room = budget.chars - NOTE_ROOM
    spare_blocks = budget.blocks - 1  # one for the note

    def heading() -> str:
        return title if not blocks else f"{title} (continued)"

    def fits(block: Block) -> bool:
        return text_chars(block) <= min(room, MAX_SECTION_TEXT) and len(blocks) < spare_blocks

    def close() -> None:
        nonlocal room, chunk, shown
        block = _section(heading(), chunk, as_code)
        blocks.append(block)
        room -= text_chars(block)
        shown += len(chunk)
        chunk = []

    pending = list(lines)
    clipped = False
    while pending:
        if fits(_section(heading(), [*chunk, pending[0]], as_code)):
            chunk.append(pending.pop(0))
            clipped = False
        elif chunk:
            close()
        elif not clipped:  # one line alone is too long for a section: clip it to fit
            free = min(room, MAX_SECTION_TEXT) - text_chars(_section(heading(), [""], as_code))
            if free < 40 or len(blocks) >= spare_blocks:
                break
            pending[0] = _raw(clip(pending[0], free))
            clipped = True
        else:
            break
    if chunk:
        close()
    left = len(lines) - shown + omitted
    if left > 0:
        blocks.append({"type": "context", "elements": [plain(f"{MARK} {left} more not shown", 50)]})
    if not blocks and not lines:
        blocks.append(_section(title, [], as_code))
    budget.spend(blocks)
    return blocks


def _raw(escaped: str) -> str:
    """Back to raw text, to be escaped again by the section (the :data:`MARK` stays)."""
    return escaped.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# -- the parent message --------------------------------------------------------------------
@dataclass(frozen=True)
class Message:
    """What ``chat.postMessage``/``chat.update``/an incoming webhook get, less channel/ts."""

    text: str
    blocks: list[Block] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "text": self.text,
            "blocks": self.blocks,
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if self.metadata:
            out["metadata"] = self.metadata
        return out


def fallback(incident: Incident, prefix: str = "") -> str:
    """The notification text: our own words, and the node only in a code span."""
    where = f" on `{clip(incident.node, 80)}`" if spannable(incident.node) else ""
    state = "resolved" if incident.status == "resolved" else incident.status
    kind = escape(incident.type)
    text = f"{prefix}[{incident.severity}] {kind}{where} ({state}, r{incident.revision})"
    return text[:MAX_FALLBACK_TEXT]


def metadata(incident: Incident) -> dict[str, Any]:
    """Message metadata naming the incident and revision: lets a reader (or a later
    de-duplication) find our messages without parsing their text."""
    return {
        "event_type": "gputriage_incident",
        "event_payload": {
            "incident_id": incident.id,
            "revision": incident.revision,
            "status": incident.status,
        },
    }


MIN_BUDGET: Final = 4000
"""The fixed blocks clip to at most about 3.3k characters; below this the evidence
would get nothing."""
FIELD_ROOM: Final = 300
"""Characters per field: seven fields stay small whatever the names."""


def render_parent(incident: Incident, budget_chars: int = DEFAULT_BUDGET) -> Message:
    """The whole incident as one message, within every limit (see the module).

    The fixed blocks (header, summary, fields, action, context) are clipped each on its
    own; the pod list (when longer than the Pods field) gets what the evidence does not
    need, and at least a third of what is left; the evidence gets the rest."""
    budget = Budget(max(budget_chars, MIN_BUDGET))
    header: Block = {
        "type": "header",
        "text": plain(f"{badge(incident)} · {incident.type}", MAX_HEADER_TEXT),
    }
    pods = [pod_label(p) for p in incident.pods]
    in_field = f"{len(pods)} · {listed(pods, PODS_IN_FIELD)}" if pods else ""
    fields = [
        field_text("Status", f"{incident.status} (r{incident.revision})", FIELD_ROOM),
        field_text("Severity", incident.severity, FIELD_ROOM),
        field_text("Node", incident.node, FIELD_ROOM),
        field_text("GPU", listed([gpu_label(g) for g in incident.gpus], 4), FIELD_ROOM),
        field_text("Pods", in_field, FIELD_ROOM),
        field_text("Owner", listed(owners(incident.pods), 3), FIELD_ROOM),
        field_text("Cluster", incident.cluster, FIELD_ROOM),
    ]
    if incident.attributes:  # type-specific facts: the XID, the node group, the confidence
        facts_text = ", ".join(f"{k}={v}" for k, v in sorted(incident.attributes.items()))
        fields.append(field_text("Details", facts_text, FIELD_ROOM))
    facts: Block = {"type": "section", "fields": fields[:MAX_FIELDS]}
    summary: Block = {"type": "section", "text": plain(incident.summary or "-", 1000)}
    action: list[Block] = []
    if incident.action:
        text = plain(f"Recommended action: {incident.action}", 1000)
        action.append({"type": "section", "text": text})
    stamps = [
        f"incident {incident.id}",
        f"revision {incident.revision}",
        f"first seen {utc(incident.first_seen)}",
        f"last seen {utc(incident.last_seen)}",
    ]
    if incident.resolved_at is not None:
        stamps.append(f"resolved {utc(incident.resolved_at)}")
    context: Block = {
        "type": "context",
        "elements": [plain(item, 200) for item in stamps[:MAX_CONTEXT_ELEMENTS]],
    }
    budget.spend([header, summary, facts, *action, context])
    lines = [evidence_line(ev) for ev in incident.evidence]
    listing: list[Block] = []
    if len(pods) > PODS_IN_FIELD:
        # At least a third of what is left; more when the evidence needs less.
        need = sum(len(escape(line)) + 1 for line in lines)
        need += 100 * (1 + need // MAX_SECTION_TEXT) + NOTE_ROOM
        share = Budget(max(budget.chars // 3, budget.chars - need), budget.blocks // 3)
        listing = literal_sections(f"Affected pods ({len(pods)})", pods, share)
        budget.spend(listing)
    total = len(lines) + incident.evidence_omitted
    title = f"Evidence ({total} events, oldest first)"
    evidence = literal_sections(title, lines, budget, incident.evidence_omitted) if total else []
    blocks = [header, summary, facts, *listing, *action, *evidence, context]
    return Message(text=fallback(incident), blocks=blocks, metadata=metadata(incident))


# -- the thread reply ----------------------------------------------------------------------


def digest(incident: Incident) -> dict[str, str]:
    """What the next revision's reply compares with: kept in the ledger's memo (small,
    strings only, never a secret). ``facts`` is a short hash of the summary, the action,
    the node, the GPUs and the attributes, ``pod_set`` of the pods (namespace, name, role),
    so a change to any of them is seen without keeping them. An older memo without a key
    counts as a change: one reply more, once, after an upgrade."""
    facts = repr(
        (
            incident.summary,
            incident.action,
            incident.node,
            incident.gpus,
            sorted(incident.attributes.items()),
        )
    )
    # Which pods, not only how many: a revision may swap one for another.
    pods = repr(sorted((p.namespace, p.name, p.role) for p in incident.pods))
    return {
        "severity": incident.severity,
        "status": incident.status,
        "pods": str(len(incident.pods)),
        "pod_set": hashlib.sha256(pods.encode()).hexdigest()[:16],
        "evidence_total": str(len(incident.evidence) + incident.evidence_omitted),
        "evidence_last": incident.evidence[-1].event_id if incident.evidence else "",
        "facts": hashlib.sha256(facts.encode()).hexdigest()[:16],
    }


def worth_a_reply(incident: Incident, memo: Mapping[str, str]) -> bool:
    """Whether this revision changed what a reader sees (beyond last seen and the
    revision number): only then does the thread get a reply."""
    return any(memo.get(key) != value for key, value in digest(incident).items())


def changes(incident: Incident, memo: Mapping[str, str], max_lines: int = 10) -> list[str]:
    """What this revision changed since the one ``memo`` describes, one line each.

    The memo knows the last evidence event delivered: the evidence after it in this
    revision is new (evidence reads in causal order). When it is not found (the core
    bounded the list, or an older ledger has no memo) the newest line stands for it."""
    out: list[str] = []
    if incident.status == "resolved":
        out.append(
            f"Resolved {utc(incident.resolved_at or incident.last_seen)}: {incident.summary}"
        )
    before = memo.get("severity", "")
    if before and before != incident.severity:
        out.append(f"Severity {before} -> {incident.severity}")
    pods_before = memo.get("pods", "")
    if pods_before and pods_before != str(len(incident.pods)):
        out.append(f"Affected pods {pods_before} -> {len(incident.pods)}")
    ids = [ev.event_id for ev in incident.evidence]
    last = memo.get("evidence_last", "")
    new = incident.evidence[ids.index(last) + 1 :] if last in ids else incident.evidence[-1:]
    if last == (ids[-1] if ids else ""):
        new = ()
    for ev in new[-max_lines:]:
        out.append(f"+ {evidence_line(ev)}")
    if len(new) > max_lines:
        out.append(f"{MARK} {len(new) - max_lines} more new evidence lines in the message")
    if not out:
        out.append(f"Updated: {incident.summary}")
    return out


def render_reply(
    incident: Incident, memo: Mapping[str, str], budget_chars: int = DEFAULT_BUDGET
) -> Message:
    """The thread reply for one revision: what changed, in as few blocks as fit."""
    budget = Budget(max(min(budget_chars, 4 * MAX_SECTION_TEXT), MIN_BUDGET))
    title = f"r{incident.revision} · {incident.status} · {badge(incident)}"
    blocks = literal_sections(title, changes(incident, memo), budget)
    prefix = "Resolved: " if incident.status == "resolved" else "Update: "
    return Message(text=fallback(incident, prefix), blocks=blocks, metadata=metadata(incident))
