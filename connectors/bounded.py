"""Bounded reads: the caps every input the CLI reads is held to, and the whole-file read.

Line input goes through :class:`connectors.files.FileReader`, which holds each line
to :data:`MAX_LINE_BYTES`; a file read whole (a settings file, a state file, a
secret, ``/proc/stat``) goes through :func:`read_small`, which holds it to the
same. So ``--config /dev/zero``, ``--state-path /dev/zero`` or a password file that is a
log is one error naming the file, never all of memory.

A module of its own, with nothing but the standard library: the Kafka settings
read their password file with it, and the processor, which imports those, must
not import the file sources (``pyproject.toml``, ``[tool.importlinter]``).
"""

from __future__ import annotations

import errno
import os
from typing import BinaryIO, Final

MAX_LINE_BYTES: Final = 16 << 20
"""The most one read holds: a line of any input, or a file read whole (settings, state,
a secret, a scrape). 16 times Kafka's default record size limit and ten times the
largest object etcd stores: no event, log line or Kubernetes object comes near it."""
MAX_INPUT_BYTES: Final = 1 << 30
"""How far from its start an over-long line's end is looked for before the input is
taken for something that is not text of lines (``/dev/zero`` reaches it in about 2 s);
also the most a reader that must hold a whole input at once (pretty-printed JSON) holds."""


class InputTooLarge(OSError):
    """A file read whole is over its cap: an ``OSError`` (``EFBIG``) naming the file, so
    every ``except OSError`` that reports a file it cannot read reports this one too."""

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {size_text(limit)}", name)


def size_text(count: int) -> str:
    """``16 MiB``, ``1 GiB``, ``512 bytes``: a cap as a person reads it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def read_bounded(stream: BinaryIO, name: str, limit: int = MAX_LINE_BYTES) -> bytes:
    """The rest of ``stream``, or :class:`InputTooLarge` when it holds more than ``limit``."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputTooLarge(name, limit)
    return data


def read_small(path: str | os.PathLike[str], limit: int = MAX_LINE_BYTES) -> bytes:
    """A whole file (settings, state, a secret) in one bounded read.

    ``OSError`` when it cannot be read, :class:`InputTooLarge` (an ``OSError`` too) when
    it holds more than ``limit``: a setting pointed at ``/dev/zero``, a log or a device
    fails at once instead of filling memory.
    """
    with open(path, "rb") as file:
        return read_bounded(file, os.fspath(path), limit)
