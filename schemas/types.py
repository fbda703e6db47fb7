"""Shared field types.

``Time`` insists on a timezone: a naive timestamp in a recorded file would be
read as UTC by some tools and as local time by others, and the core's event-time
ordering would silently depend on where it ran.
"""

from datetime import datetime
from typing import Annotated, Literal

import msgspec

Time = Annotated[datetime, msgspec.Meta(tz=True)]
"""An RFC 3339 timestamp with an explicit offset (``Z`` or ``+hh:mm``)."""

Op = Literal["added", "modified", "deleted"]
Scope = Literal["node", "cluster"]
"""Which key a node-scoped record is for: its node's (the record as the source saw it)
or its cluster's (the copy :func:`schemas.keys.routed` makes for the cluster-scoped
rules: pending pods that got scheduled, the cross-source GPU counts)."""
"""What happened to the Kubernetes object, as the watch API says it."""

Severity = Literal["page", "ticket", "info"]
XidClass = Literal["fatal", "app", "follow-up", "info", "unknown"]
"""How the core treats an XID code (the catalog's ``class``)."""
IncidentStatus = Literal["open", "updated", "resolved"]
