"""The engine's compiled copy of the correlation key's node part agrees with the schemas'.

``streams.core.engine.key_node`` repeats :func:`schemas.keys.key_node` so that the
compiled core does not call into interpreted code for every event; the router and the
producers key records with the original. If the two ever disagreed, an event would be
applied to another key than the one its partition was chosen by.
"""

from __future__ import annotations

from collections import Counter

from gputriage.simulate import StreamSpec, generate_lines
from schemas import keys
from schemas.codec import AnyEvent, decode_event
from schemas.keys import Router
from streams.core import engine
from tests.paths import EXAMPLES


def _routed() -> list[AnyEvent]:
    lines = (EXAMPLES / "scenario.jsonl").read_bytes().splitlines()
    lines += list(generate_lines(StreamSpec(events=5_000, nodes=20, seed=5, clusters=2)))
    router = Router()
    return [routed for line in lines for routed in router.route(decode_event(line))]


def test_engine_key_node_is_the_schemas_key_node() -> None:
    events = _routed()
    for event in events:
        assert engine.key_node(event) == keys.key_node(event), event
    # Both sides of the rule were exercised: node-keyed records, cluster copies of
    # node-scoped ones, and records of no node at all.
    kinds = Counter(
        ("copy" if keys.is_copy(e) else "node" if keys.key_node(e) else "cluster") for e in events
    )
    assert min(kinds[k] for k in ("node", "copy", "cluster")) > 0, kinds
