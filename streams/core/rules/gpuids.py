"""How the node state spells GPUs: packed uuids, the uuid -> bus join bytes, MIG keys.

Pure functions over bytes and strings, kept out of :mod:`streams.core.state` (which holds
msgspec Structs and stays Python) so that mypyc compiles them: the node key calls them
on every binding and XID, and the interpreted versions were a large part of a binding's
cost. Import them from here (``streams.core.state`` imports only what it uses itself).
"""

from __future__ import annotations

import zlib
from typing import Final

_PREFIXES: Final = ("GPU", "MIG")
_HEX: Final = "0123456789abcdef"


def pack_uuid(text: str) -> bytes:
    """A GPU or MIG uuid as compact bytes: ``GPU-``/``MIG-`` + a lower-case UUID
    become 17 bytes (50 in memory instead of 89); any other spelling is kept as
    UTF-8 behind a 0xff marker. Round-trips exactly through :func:`unpack_uuid`.

    Why: 40k GPUs in a 5,000-node cluster make the uuid strings the largest
    single item of the state. Bytes (not a 128-bit int) so that MessagePack
    snapshots can carry it.

    The canonical shape is ``(GPU|MIG)-`` then 8-4-4-4-12 lower-case hex digits, the
    whole text (40 characters), tested without a regular expression. Trap: only
    ``0-9a-f`` count as digits (``bytes.fromhex`` would take upper case and spaces): an
    upper-case uuid is another spelling, kept as text, as it always was.
    """
    if (
        len(text) == 40
        and text[3] == "-"
        and text[12] == "-"
        and text[17] == "-"
        and text[22] == "-"
        and text[27] == "-"
    ):
        head = text[:3]
        if head in {"GPU", "MIG"}:
            # The four dashes are where they belong: 32 characters left means no other.
            digits = text[4:].replace("-", "")
            if len(digits) == 32 and not digits.strip(_HEX):
                return (b"\x00" if head == "GPU" else b"\x01") + bytes.fromhex(digits)
    return b"\xff" + text.encode() if text else b""


def unpack_uuid(value: bytes) -> str:
    if not value:
        return ""
    if value[0] == 0xFF:
        return value[1:].decode()
    h = value[1:].hex()
    return f"{_PREFIXES[value[0]]}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def join_pairs(blob: bytes) -> list[tuple[bytes, str]]:
    """The (packed uuid, bus id) pairs of :attr:`NodeState.gpu_joins`, in order."""
    pairs = []
    at, end = 0, len(blob)
    while at < end:
        size = blob[at]
        uuid = blob[at + 1 : at + 1 + size]
        at += 1 + size
        size = blob[at]
        pairs.append((uuid, blob[at + 1 : at + 1 + size].decode()))
        at += 1 + size
    return pairs


def join_lookup(blob: bytes, uuid: bytes) -> str:
    """The bus id :attr:`NodeState.gpu_joins` pairs with this packed uuid, or "": one
    walk over the bytes, no pair built (it runs on every binding of an idle GPU)."""
    at, end, size = 0, len(blob), len(uuid)
    while at < end:
        own = blob[at]
        bus_at = at + 1 + own
        bus_end = bus_at + 1 + blob[bus_at]
        if own == size and blob.startswith(uuid, at + 1):
            return blob[bus_at + 1 : bus_end].decode()
        at = bus_end
    return ""


def join_pair(uuid: bytes, bus: str) -> bytes:
    """One pair of :attr:`NodeState.gpu_joins`: each field behind its length in one byte;
    empty when a field is over 255 bytes (no real uuid or bus id), so it is left out."""
    raw = bus.encode()
    if len(uuid) > 255 or len(raw) > 255:
        return b""
    return bytes((len(uuid),)) + uuid + bytes((len(raw),)) + raw


def join_blob(pairs: list[tuple[bytes, str]]) -> bytes:
    """The bytes of :attr:`NodeState.gpu_joins` for these pairs (:func:`join_pair`)."""
    return b"".join([join_pair(uuid, bus) for uuid, bus in pairs])


MIG_SEPARATOR: Final = "/GI"
"""A MIG instance's key in :attr:`NodeState.gpus` is its parent GPU's key, this, and
its GPU instance id: ``0000:07:00.0/GI5`` (or ``uuid:GPU-.../GI5`` until the bus id
is known). Records written before ``gpu_instance`` existed spelled dcgm's instances
``gpu_uuid="<uuid>/GI<id>"``: the same shape, on purpose."""


def split_gpu_key(key: str) -> tuple[str, int | None]:
    """``(parent GPU key, MIG instance id)``; the id is None for a whole GPU."""
    at = key.rfind(MIG_SEPARATOR)
    if at < 0:
        return key, None
    tail = key[at + len(MIG_SEPARATOR) :]
    return (key[:at], int(tail)) if tail.isdigit() else (key, None)


DRA_MIG_BASE: Final = 1 << 20
"""The first instance id of a MIG device known from DRA alone (``<parent>/GI<id>``, id at
or above this). NVIDIA's DRA driver names a MIG device by its ``MIG-`` uuid and
publishes no GPU-instance id, so its binding cannot take the key an XID's ``GPU-I:NN``
names: it takes this base plus a hash of the uuid (:func:`dra_instance`), no real
instance id comes near it, and the published :class:`~schemas.incidents.GpuRef` says no
instance for it (:func:`streams.core.state.gpu_ref`)."""


def dra_instance(mig_uuid: str) -> int:
    """The instance id of a MIG device DRA names by ``mig_uuid`` alone: stable for the
    uuid, in every process (a CRC, not ``hash``: string hashing is randomised)."""
    return DRA_MIG_BASE + (zlib.crc32(mig_uuid.encode()) & 0xFFFFF)


def is_dra_instance(instance: int | None) -> bool:
    """Is this a MIG instance id made by :func:`dra_instance`?"""
    return instance is not None and instance >= DRA_MIG_BASE
