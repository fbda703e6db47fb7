"""Every node source family says which raw topics it publishes to, once.

The publish loop announces a node source's own key's partition on those topics at start
(so a quiet node agent heartbeats from the first interval); a family missing here would
again be heard only after its first record.
"""

from __future__ import annotations

from connectors.publish import NODE_SOURCE_SCHEMAS
from schemas.topics import SCHEMA_SOURCES
from schemas.wellknown import SOURCE_FAMILIES


def test_every_node_source_family_declares_what_it_publishes() -> None:
    assert set(NODE_SOURCE_SCHEMAS) == set(SOURCE_FAMILIES)
    for family, schemas in NODE_SOURCE_SCHEMAS.items():
        assert schemas, family
        assert all(schema in SCHEMA_SOURCES for schema in schemas), family
