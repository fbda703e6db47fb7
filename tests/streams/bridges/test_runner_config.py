"""The runner's pieces: ``[bridge]`` settings, the ledger record and topic, the scrubber,
periodic endpoints."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import jsonschema
import msgspec
import pytest

from connectors.bridges.base import Delivered, Route
from connectors.bridges.registry import KINDS, UnknownKind, load, settings_type
from connectors.bridges.scrub import Scrubber, route_secrets
from connectors.kafka.admin import ensure_topics
from gputriage.settings import Settings, SettingsError, load_settings
from schemas.bridges import BridgeDelivery, BridgeGroup
from schemas.codec import encode, typed_decoder
from schemas.jsonschema import DOCUMENT_DIR
from streams.bridges.ledger import Ledger, delivery_key, ledger_topic
from streams.bridges.settings import (
    BridgeConfigError,
    BridgeSettings,
    group_id,
    kind_options,
    routes_of,
)
from tests.bridge_helpers import Settings as JsonPostSettings
from tests.bridge_helpers import bridging, incident, publish, receiving, route
from tests.cli_helpers import load_tables
from tests.kafka_helpers import KafkaTestEnv, eventually, produce
from tests.paths import ROOT


# -- settings ------------------------------------------------------------------------
def test_kind_tables_and_routes_load_from_file_and_environment() -> None:
    settings = load_tables(
        {"bridge": {"min_update_seconds": 5, "jsonpost": {"user_agent": "x"}}},
        {
            "GPUTRIAGE_BRIDGE__MODULES": '{jsonpost = "tests.bridge_helpers"}',
            "GPUTRIAGE_BRIDGE__JSONPOST__ROUTES": '[{name = "a", severities = ["page"]}]',
        },
    )
    bridge = settings.bridge
    assert bridge.min_update_seconds == 5
    assert bridge.kinds["jsonpost"]["user_agent"] == "x"
    [a] = routes_of(bridge, "jsonpost")
    assert a.route() == Route(name="a", severities=frozenset({"page"}))
    assert kind_options(bridge, "jsonpost", JsonPostSettings) == JsonPostSettings(user_agent="x")
    assert group_id(bridge, "gputriage", "jsonpost") == "gputriage-bridge-jsonpost"
    assert "bridge" in Settings.__struct_fields__


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[bridge.pagerdty]\n", "bridge.pagerdty: unknown bridge kind"),
        (
            '[bridge.slack]\nroutes = [{name = "a"}, {name = "a"}]\n',
            "bridge.slack.routes[1].name: 'a' is used twice",
        ),
        ('[bridge.slack]\nroutes = [{name = "a b"}]\n', "bridge.slack.routes[0].name"),
        (
            '[bridge.slack]\nroutes = [{name = "a", statuses = ["closed"]}]\n',
            "bridge.slack.routes[0].statuses[0]: Invalid enum value 'closed'",
        ),
        ("[bridge]\nmin_update_seconds = -1\n", "bridge.min_update_seconds: must be at least 0"),
    ],
)
def test_a_bad_bridge_table_fails_at_load_naming_the_key(
    tmp_path: Path, toml: str, message: str
) -> None:
    path = tmp_path / "gputriage.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(SettingsError) as caught:
        load_settings(str(path), environ={})
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"invalid configuration in {path}: ")


def test_kind_options_are_checked_by_the_kinds_own_struct() -> None:
    bridge = load_settings(
        None,
        environ={
            "GPUTRIAGE_BRIDGE__MODULES": '{jsonpost = "tests.bridge_helpers"}',
            "GPUTRIAGE_BRIDGE__JSONPOST__USER_AGENT": "3",
        },
    ).bridge
    with pytest.raises(BridgeConfigError, match=r"bridge\.jsonpost\.user_agent: Expected `str`"):
        kind_options(bridge, "jsonpost", JsonPostSettings)


def test_the_registry_loads_by_name_and_says_what_is_missing() -> None:
    assert set(KINDS) == {"pagerduty", "slack", "alertmanager", "webhook"}
    module = load("jsonpost", {"jsonpost": "tests.bridge_helpers"})
    assert settings_type(module) is JsonPostSettings
    with pytest.raises(UnknownKind, match="expected one of: pagerduty"):
        load("nope")
    with pytest.raises(UnknownKind, match="has no Settings"):
        load("odd", {"odd": "tests.kafka_helpers"})


# -- the ledger record ----------------------------------------------------------------
_decode = typed_decoder(BridgeDelivery | BridgeGroup)  # type: ignore[arg-type]


def test_an_older_or_newer_ledger_record_still_decodes() -> None:
    old = b'{"schema":"bridge_delivery.v1","route":"r","incident_id":"i","revision":3}'
    entry = _decode(old)
    assert entry == BridgeDelivery(route="r", incident_id="i", revision=3)
    assert isinstance(entry, BridgeDelivery)
    assert (entry.state, entry.memo, entry.sending_revision) == ("delivered", {}, 0)
    newer = b'{"schema":"bridge_delivery.v1","route":"r","incident_id":"i","later_field":1}'
    assert _decode(newer) == BridgeDelivery(route="r", incident_id="i")


def test_ledger_records_validate_against_their_published_schemas() -> None:
    records = [
        BridgeDelivery(route="r", incident_id="i", revision=2, memo={"ts": "1"}, state="sending"),
        BridgeGroup(route="r", group="c1/n1", lead="i", pages=(1.0,), lead_view=incident("i", 1)),
    ]
    for record in records:
        tag = record.__struct_config__.tag
        document = json.loads((DOCUMENT_DIR / f"{tag}.json").read_text("utf-8"))
        jsonschema.validate(json.loads(encode(record)), document)


@pytest.mark.asyncio
async def test_the_ledger_restores_the_newest_entry_and_skips_a_corrupt_record(
    kafka: KafkaTestEnv,
) -> None:
    spec = ledger_topic(kafka.layout, "g")
    assert spec.configs == kafka.layout.incidents.configs
    assert spec.configs["cleanup.policy"] == "compact,delete"
    assert spec.name == f"{kafka.prefix}.bridge.g.ledger"
    await ensure_topics(kafka.kwargs, kafka.layout, extra=(spec,))
    ledger = Ledger(kafka.kwargs, spec.name)
    await ledger.start()
    try:
        await ledger.write(BridgeDelivery(route="r", incident_id="a", revision=1))
        await ledger.write(BridgeDelivery(route="r", incident_id="a", revision=2))
        await ledger.write(BridgeGroup(route="r", group="c1/n1", lead="a"))
    finally:
        await ledger.stop()
    await produce(kafka.bootstrap, spec.name, [(delivery_key("r", "b"), b"not json")])
    restored = Ledger(kafka.kwargs, spec.name)
    assert await restored.restore(20) == 1
    assert restored.get("r", "a") == BridgeDelivery(route="r", incident_id="a", revision=2)
    assert restored.group("r", "c1/n1") == BridgeGroup(route="r", group="c1/n1", lead="a")
    assert restored.corrupt == 1


# -- secrets --------------------------------------------------------------------------
def test_the_scrubber_masks_secrets_in_messages_arguments_and_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scrub = Scrubber(["hunter22-secret", "abc"])  # too short to be worth masking: kept
    logger = logging.getLogger("test.scrub")
    caplog.handler.addFilter(scrub.filter)
    try:
        logger.warning("token %s in %s", "hunter22-secret", "abc")
        try:
            raise ValueError("bad key hunter22-secret")
        except ValueError:
            logger.exception("failed")
    finally:
        caplog.handler.removeFilter(scrub.filter)
    assert "hunter22-secret" not in caplog.text
    assert "token *** in abc" in caplog.text
    assert "bad key ***" in caplog.text
    assert scrub("x hunter22-secret y") == "x *** y"
    hook = "https://hooks.example/services/T0/B0/s3cr3t path"
    masked = Scrubber(route_secrets([Route(name="r", target={"url_env": "U"})], {"U": hook}))
    assert masked(f"GET {hook}") == "GET ***"
    assert masked("404: /services/T0/B0/s3cr3t%20path not found") == "404: *** not found"


# -- periodic endpoints ----------------------------------------------------------------
class Ticking:
    """Wraps the tests' endpoint with :class:`~connectors.bridges.base.Periodic`."""

    interval_seconds = 0.05

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.kind = "jsonpost"
        self.restored: dict[tuple[str, str], Delivered] | None = None
        self.ticks = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def restore(self, entries: Mapping[tuple[str, str], Delivered]) -> None:
        self.restored = dict(entries)

    async def tick(self, now: float) -> None:
        self.ticks += 1
        if self.ticks == 1:
            raise RuntimeError("a failing tick is logged, never fatal")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_periodic_endpoint_is_restored_from_the_ledger_and_ticked(
    kafka: KafkaTestEnv, caplog: pytest.LogCaptureFixture
) -> None:
    async with receiving() as receiver:
        async with bridging(kafka, [route("r", receiver)]):
            await publish(kafka, [incident("a", 1)])
            await eventually(lambda: receiver.got, timeout=20, what="a delivery")
        made: list[Ticking] = []
        async with bridging(kafka, [route("r", receiver)], wrap=_ticking(made)):
            await eventually(lambda: made and made[0].ticks >= 3, timeout=20, what="ticks")
    [ticking] = made
    assert ticking.restored == {("r", "a"): Delivered(1, "open", {"seen": "1"})}
    assert "periodic tick failed" in caplog.text


def _ticking(made: list[Ticking]) -> Callable[[object], object]:
    def wrap(endpoint: object) -> object:
        made.append(Ticking(endpoint))
        return made[-1]

    return wrap


def test_bridge_settings_defaults_are_sane() -> None:
    defaults = BridgeSettings()
    assert defaults.storm_pages == 3
    assert defaults.storm_window_seconds == 600
    assert defaults.metrics_port == 9470
    assert msgspec.convert({}, BridgeSettings) == defaults


# -- docs/bridges.md ------------------------------------------------------------------
def _bridges_section() -> str:
    return (ROOT / "docs" / "bridges.md").read_text(encoding="utf-8")


def test_the_bridges_page_configuration_loads(tmp_path: Path) -> None:
    section = _bridges_section()
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "readme.toml"
    path.write_text(toml, encoding="utf-8")
    bridge = load_settings(str(path), environ={}).bridge
    assert bridge == msgspec.structs.replace(BridgeSettings(), kinds=bridge.kinds)
    names = [r.name for r in routes_of(bridge, "pagerduty")]
    assert names == ["oncall", "ml-team"]


def test_the_bridges_page_names_every_bridge_metric_and_only_those() -> None:
    from streams.bridges.metrics import BridgeMetrics  # noqa: PLC0415

    named = set(re.findall(r"`(gputriage_bridge_[a-z_]+)", _bridges_section()))
    exported = {
        metric.name + ("_total" if metric.type == "counter" else "")
        for metric in BridgeMetrics().registry.collect()
    }
    assert named == exported


@pytest.mark.parametrize("kind", ["pagerduty", "slack", "alertmanager", "webhook"])
def test_each_vendor_subsection_has_a_configuration_that_loads(kind: str, tmp_path: Path) -> None:
    """docs/bridges.md's per-vendor example: the settings load, the kind's options convert, and
    every route's target passes the endpoint's own check once its secrets exist."""
    section = _bridges_section()
    blocks = [b.split("```", 1)[0] for b in section.split("```toml\n")[2:]]  # after the first
    mine = [b for b in blocks if f"[bridge.{kind}" in b]
    assert len(mine) == 1, f"one example for {kind}"
    files: dict[str, str] = {}
    for match in re.finditer(r'"(/var/run/secrets/[^"]+)"', mine[0]):
        secret = tmp_path / f"secret{len(files)}"
        secret.write_text("x" * 32 + "\n", encoding="utf-8")
        files[match.group(1)] = str(secret)
    toml = mine[0]
    for original, local in files.items():
        toml = toml.replace(original, local)
    path = tmp_path / "readme.toml"
    path.write_text(toml, encoding="utf-8")
    bridge = load_settings(str(path), environ={}).bridge
    module = load(kind)
    options = kind_options(bridge, kind, settings_type(module))
    environ = dict.fromkeys(re.findall(r'_env = "([A-Z_]+)"', toml), "x" * 32)
    routes = routes_of(bridge, kind)
    assert routes
    endpoint = module.build(options, None, environ)
    for each in routes:
        assert endpoint.check_route(each) is None, each.name
