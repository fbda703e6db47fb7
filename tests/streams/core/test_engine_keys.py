"""The engine keys events with :func:`schemas.keys.key_node` itself, not a copy of it.

The router and the producers key records with that function; if the engine used another
one, an event could be applied to another key than the one its partition was chosen by.
A copy once existed only because ``schemas`` was interpreted; the router is compiled
with the core now (:mod:`schemas.native`), so the engine calls the original natively.
"""

from __future__ import annotations

from schemas import keys
from streams.core import engine


def test_the_engine_keys_events_with_the_schemas_key_node() -> None:
    assert vars(engine)["key_node"] is keys.key_node
