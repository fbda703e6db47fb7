"""The GPU spellings of the node state (:mod:`streams.core.rules.gpuids`), compiled now.

``pack_uuid`` no longer runs a regular expression: the canonical shape is tested by
hand. The expression it replaced is the reference here, over real uuids, their near
misses (a digit out of range, upper case, a dash moved, a length off by one, another
prefix) and random text; whatever the expression did not take must still be kept as
text behind the 0xff marker, and everything must round-trip.
"""

from __future__ import annotations

import random
import re

import pytest

from streams.core.rules.gpuids import pack_uuid, split_gpu_key, unpack_uuid

_REFERENCE = re.compile(
    r"(GPU|MIG)-([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})"
)


def _reference(text: str) -> bytes:
    match = _REFERENCE.fullmatch(text)
    if match is None:
        return b"\xff" + text.encode() if text else b""
    kind = ("GPU", "MIG").index(match[1])
    return bytes((kind,)) + bytes.fromhex("".join(match.group(2, 3, 4, 5, 6)))


REAL = [
    # nvidia-smi -L / dcgm-exporter's gpu_uuid label, and a MIG device's uuid.
    "GPU-5fd4ef3b-0ab0-4a5e-9c2e-6a2c1a0a9b1d",
    "MIG-8f4b1c3e-2d5a-5b6c-9e7f-0a1b2c3d4e5f",
    "GPU-00000000-0000-4000-8000-000000000000",
]


def _near_misses(uuid: str, rnd: random.Random) -> list[str]:
    at = rnd.randrange(4, len(uuid))
    return [
        uuid.upper(),
        uuid[:-1],
        uuid + "0",
        uuid[:at] + "g" + uuid[at + 1 :],
        uuid[:at] + "A" + uuid[at + 1 :],
        uuid[:at] + " " + uuid[at + 1 :],
        uuid[:at] + "\u0661" + uuid[at + 1 :],  # an Arabic-Indic digit: not 0-9
        uuid.replace("-", "_", 1),
        uuid[:12] + uuid[13] + "-" + uuid[14:],
        "GPX" + uuid[3:],
        "gpu" + uuid[3:],
        uuid + "/GI3",
    ]


def test_pack_uuid_takes_what_the_expression_took_and_nothing_else() -> None:
    rnd = random.Random(7)
    texts = ["", "GPU-", "unknown", *REAL]
    for uuid in REAL:
        texts.extend(_near_misses(uuid, rnd))
    alphabet = "0123456789abcdefABCDEF-GPUMI g"
    for _ in range(3000):
        canonical = "GPU-" + "-".join(
            "".join(rnd.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)
        )
        texts.append(canonical)
        texts.extend(_near_misses(canonical, rnd))
        texts.append("".join(rnd.choice(alphabet) for _ in range(rnd.choice([39, 40, 41]))))
    packed = 0
    for text in texts:
        assert pack_uuid(text) == _reference(text), text
        assert unpack_uuid(pack_uuid(text)) == text
        packed += len(pack_uuid(text)) == 17
    assert packed > 3000, "the canonical shape must be packed"


@pytest.mark.parametrize(
    ("key", "parent", "instance"),
    [
        ("0000:07:00.0", "0000:07:00.0", None),
        ("0000:07:00.0/GI5", "0000:07:00.0", 5),
        ("uuid:GPU-x/GI12", "uuid:GPU-x", 12),
        ("0000:07:00.0/GIx", "0000:07:00.0/GIx", None),
    ],
)
def test_split_gpu_key(key: str, parent: str, instance: int | None) -> None:
    assert split_gpu_key(key) == (parent, instance)
