"""Shared field types, and the bounds a record's values must keep.

``Time`` insists on a timezone: a naive timestamp in a recorded file would be
read as UTC by some tools and as local time by others, and the core's event-time
ordering would silently depend on where it ran.

The bounds are rules of the domain, wide enough for every real record and tight
enough that no single record can stop a consumer: a megabyte id bloats every state
snapshot that keeps it, a 100,000-pod binding every join on its GPU, an integer past
64 bits cannot be written to MessagePack. msgspec checks the length and range
bounds as it decodes (``Meta``); it cannot bound a datetime, so the codec checks
times against :data:`TIME_FLOOR` and :data:`TIME_CEILING` after decoding.
"""

from datetime import UTC, datetime
from typing import Annotated, Final, Literal

import msgspec

Time = Annotated[datetime, msgspec.Meta(tz=True)]
"""An RFC 3339 timestamp with an explicit offset (``Z`` or ``+hh:mm``)."""

TIME_FLOOR: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest instant an event may carry: the Unix epoch, included.

Kafka timestamps and the progress headers (ms since the epoch) cannot say anything
earlier, and a node without a real-time clock reports 1970 itself, so 1970 must
decode. Trap: ``0001-01-01T00:00:00+14:00`` is a valid RFC 3339 time whose UTC is in
year 0, where ``datetime`` cannot go: converting it raised inside the core. Never a
bound relative to the present: replaying last year's events must keep working."""

TIME_CEILING: Final = datetime.max.replace(tzinfo=UTC)
"""The latest instant an event may carry: the end of year 9999 UTC, included.

Every time an RFC 3339 parser gives is in range in its own offset; this refuses the
ones whose UTC is not (``9999-12-31T23:59:59-12:00`` is in year 10000 UTC). Far-future
times short of it are the processor's to refuse, relative to its clock (its
``max_future_seconds``); the core saturates what it adds to them at this instant."""

MAX_ID_LENGTH: Final = 8192
"""Characters in an event id. The longest a source makes is a heartbeat's,
``heartbeat:file:<path>@<cluster>/<node>``, with a path of up to 4096 bytes (Linux
``PATH_MAX``); every other id is a Kubernetes uid and resourceVersion, a boot id and
sequence number, or a hash (tens of characters)."""

MAX_NAME_LENGTH: Final = 253
"""Characters in a Kubernetes object name (a DNS subdomain: nodes, pods, owners) and
in a cluster name, which names the same kind of thing and is a key prefix."""

MAX_LABEL_LENGTH: Final = 63
"""Characters in a DNS label: a namespace, a container name, a label's value."""

MAX_NODE_PODS: Final = 1024
"""Pods on one GPU, hence on one node: the kubelet's ``--max-pods`` is 110 by default,
250-256 at most on the managed services, 737 on the largest EKS instances."""

MAX_XID_CODE: Final = 65535
"""The largest XID (or SXid) code: NVIDIA's catalog ends near 160 and NVSwitch SXids
are five-digit numbers below 30000, so a 16-bit range leaves ample room. Codes are
never negative."""

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
"""The range of every other integer of an event. Kubernetes' own are 32-bit
(``restartCount``, ``exitCode``, an Event's ``count``), and so is every other one we
carry: pids, NVML indices and MIG instance ids, GPU counts, node-group sizes. Trap:
msgspec decodes an integer of any size, but the state topic's MessagePack holds none
past 64 bits; a node whose capacity said 10**23 crashed the worker at its next
snapshot, at every restart. 32 bits also keep any sum the core makes over a cluster's
pods far inside 64."""

MAX_RESOURCE_VERSION: Final = 2**63 - 1
"""The largest Kubernetes resourceVersion carried as a number: etcd's revision is a signed
64-bit counter, so every real one fits, and so does MessagePack. A longer string of digits
is no etcd revision: it reads as 0, "unknown" (:func:`schemas.ids.resource_version_number`)."""

Id = Annotated[str, msgspec.Meta(max_length=MAX_ID_LENGTH)]
Int32 = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]
Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME_LENGTH)]
Label = Annotated[str, msgspec.Meta(max_length=MAX_LABEL_LENGTH)]
XidCode = Annotated[int, msgspec.Meta(ge=0, le=MAX_XID_CODE)]
ResourceVersion = Annotated[int, msgspec.Meta(ge=0, le=MAX_RESOURCE_VERSION)]

Op = Literal["added", "modified", "deleted"]
"""What happened to the Kubernetes object, as the watch API says it."""
Scope = Literal["node", "cluster"]
"""Which key a node-scoped record is for: its node's (the record as the source saw it)
or its cluster's (the copy :class:`schemas.keys.Router` makes for the cluster-scoped
rules: pending pods that got scheduled, the cross-source GPU counts)."""

Severity = Literal["page", "ticket", "info"]
XidClass = Literal["fatal", "app", "follow-up", "info", "unknown"]
"""How the core treats an XID code (the catalog's ``class``)."""
IncidentStatus = Literal["open", "updated", "resolved"]
