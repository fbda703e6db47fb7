"""Arbitrary settings and arbitrary input give a result or one line, never a traceback.

Property tests, in-process (no subprocess per example), a few hundred examples each:

* the settings loader, fed arbitrary TOML values for arbitrary known (and unknown)
  keys, from a file and from ``GPUTRIAGE_*`` variables, returns a :class:`Settings`
  whose derived objects all build, or raises exactly one :class:`SettingsError` whose
  message is one line; arbitrary bytes as the file, the same;
* each ``ingest`` verb's parsing (``kmsg``, ``k8s``, ``dcgm``), fed arbitrary lines
  and mutations of the recorded samples in ``tests/data``, yields events (which
  encode) or errors as values, and never raises.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tomllib
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import msgspec.inspect
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.dcgm.offline import ingest_dcgm
from connectors.files import FileReader
from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.offline import slim_documents
from connectors.k8s.slim import DEFAULT_CONFIG
from connectors.xid.lines import LineContext
from connectors.xid.offline import assumed_time, read_xids
from gputriage.settings import SECTIONS, Settings, SettingsError, load_settings
from schemas.codec import RecordError, encode
from schemas.topics import state_topic, topic_layout
from tests import paths

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# -- the settings loader ---------------------------------------------------------------
def _leaf_paths(kind: Any, prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    info = msgspec.inspect.type_info(kind)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        path = (*prefix, field.name)
        child = field.type
        if isinstance(child, msgspec.inspect.StructType):
            yield path
            yield from _leaf_paths(child.cls, path)
        elif isinstance(child, msgspec.inspect.DictType):
            yield path
            yield (*path, "host_oom_kill" if path == ("core", "severity") else "xids")
        else:
            yield path


KNOWN: tuple[tuple[str, ...], ...] = tuple(
    path for path in _leaf_paths(Settings, ()) if path[0] in SECTIONS
)
"""Every key a settings file may set, as a path: ``("connect", "kmsg", "year")``..."""
assert ("processor", "batch_max") in KNOWN
assert ("connect", "dcgm", "interval_seconds") in KNOWN

_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
paths_ = st.one_of(
    st.sampled_from(KNOWN),
    st.sampled_from(KNOWN).flatmap(lambda p: st.tuples(*map(st.just, p[:-1]), _names)),
    st.lists(_names, min_size=1, max_size=3).map(tuple),
)
_scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, -1, 65535, 65536, 2**31, 10**6, 10**7]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.01, 0.5, 1e-300, 86400.0, 1e300]),
    st.booleans(),
    st.text(max_size=20),
    st.sampled_from(["", "gputriage", "a b", "k:9092", "::::", "UTC", "page", "Evicted"]),
    st.dates(),
    st.datetimes(timezones=st.none() | st.just(UTC)),
    st.times(),
)
toml_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=6,
)


def _toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """``value`` as a TOML inline value (every type :data:`toml_values` makes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_toml_string(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def _nested(assignments: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path, value in assignments:
        target = root
        for key in path[:-1]:
            child = target.get(key)
            if not isinstance(child, dict):
                child = target[key] = {}
            target = child
        target[path[-1]] = value
    return root


def _loaded_or_one_line(load: Any) -> Settings | None:
    """Run ``load()``: a Settings whose derived objects build, or one one-line SettingsError."""
    try:
        loaded = load()
    except SettingsError as exc:
        message = str(exc)
        assert message, "an empty error"
        assert message.isprintable(), message
        return None
    assert isinstance(loaded, Settings)
    # Validated once, at load: nothing built from the settings may fail later.
    loaded.core_config()
    layout = topic_layout(loaded.topics)
    state_topic(layout, loaded.processor.app_id)
    from gputriage.process import processor_options  # noqa: PLC0415 - imports aiokafka

    processor_options(loaded)
    with contextlib.suppress(SettingsError):  # reads the password file: may fail, in one line
        loaded.kafka_settings()
    return loaded


def test_the_settings_loader_accepts_or_says_one_line(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = tmp_path_factory.mktemp("settings")

    @FUZZ
    @given(assignments=st.lists(st.tuples(paths_, toml_values), min_size=1, max_size=4))
    def check(assignments: list[tuple[tuple[str, ...], Any]]) -> None:
        tables = _nested(assignments)
        text = "".join(f"{_toml_string(k)} = {toml_value(v)}\n" for k, v in tables.items())
        assert tomllib.loads(text) is not None  # the writer makes TOML: the loader is reached
        path = folder / "fuzz.toml"
        path.write_text(text, encoding="utf-8")
        _loaded_or_one_line(lambda: load_settings(str(path), environ={}))

    check()


_env_names = st.lists(
    st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_-0123456789"), max_size=12),
    min_size=1,
    max_size=3,
)


@FUZZ
@given(
    variables=st.lists(
        st.tuples(
            st.one_of(st.sampled_from(KNOWN).map(list), _env_names),
            st.one_of(toml_values.map(toml_value), st.text(max_size=30)),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_settings_from_the_environment_are_accepted_or_one_line(
    variables: list[tuple[list[str], str]],
) -> None:
    environ = {
        "GPUTRIAGE_" + "__".join(p.upper() for p in path): value for path, value in variables
    }
    _loaded_or_one_line(lambda: load_settings(None, environ=environ))


def test_a_settings_file_of_arbitrary_bytes_is_accepted_or_one_line(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = tmp_path_factory.mktemp("bytes")
    example = (paths.EXAMPLES / "gputriage.toml").read_bytes()

    @FUZZ
    @given(
        data=st.one_of(
            st.binary(max_size=200),
            st.tuples(st.integers(0, len(example)), st.binary(max_size=8)).map(
                lambda cut: example[: cut[0]] + cut[1] + example[cut[0] :]
            ),
        )
    )
    def check(data: bytes) -> None:
        path = folder / "fuzz.toml"
        path.write_bytes(data)
        _loaded_or_one_line(lambda: load_settings(str(path), environ={}))

    check()


# -- ingest kmsg -----------------------------------------------------------------------------
_XID_TEXTS = st.builds(
    "NVRM: Xid (PCI:{}): {}, pid={}, name={}, {}".format,
    st.sampled_from(["0000:9b:00", "0000:9b:00.0", "GPU-I:0000:9b:00", "zz", "", "ffff:ff:ff"]),
    st.one_of(st.integers(-5, 10**20), st.sampled_from(["79", "x", "", "1e9"])),
    st.one_of(st.integers(-1, 10**20), st.just("'<unknown>'")),
    st.text(max_size=8),
    st.text(max_size=20),
)
_PREFIXES = st.one_of(
    st.builds("[{}] ".format, st.one_of(st.floats(allow_nan=True), st.text(max_size=10))),
    st.builds(
        "{},{},{},-;".format,
        st.integers(-1, 200),
        st.integers(-1, 2**64),
        st.one_of(st.integers(-1, 2**70), st.text(max_size=5)),
    ),
    st.builds(
        "{} host kernel: ".format,
        st.sampled_from(["Nov 30 10:00:00", "Feb 30 25:61:61", "Jan  1 00:00:00"]),
    ),
    st.builds(
        "[{}] ".format,
        st.sampled_from(["Mon Nov 30 10:00:00 2026", "Sat Dec 31 23:59:59 9999", "x"]),
    ),
    st.builds("{} ".format, st.datetimes().map(lambda t: t.isoformat() + ",000000+00:00")),
    st.just(""),
)
_kmsg_lines = st.one_of(
    st.tuples(_PREFIXES, _XID_TEXTS).map(lambda pt: (pt[0] + pt[1]).encode()),
    st.builds(
        lambda t, m, c: json.dumps(
            {"__REALTIME_TIMESTAMP": t, "MESSAGE": m, "__CURSOR": c, "_BOOT_ID": "b"}
        ).encode(),
        st.one_of(st.integers(-(2**70), 2**70).map(str), st.text(max_size=5)),
        _XID_TEXTS,
        st.text(max_size=5),
    ),
    st.binary(max_size=120),
)
_SAMPLES_KMSG = [
    line
    for name in ("dmesg.log", "dmesg_ctime.log", "journal.jsonl", "kmsg.txt", "public_prefixes.log")
    for line in (paths.DATA / "kmsg" / name).read_bytes().splitlines()
    if line.strip()
]


def _mutated(lines: list[bytes]) -> st.SearchStrategy[bytes]:
    """A recorded line with a few bytes replaced or inserted."""
    return st.tuples(st.sampled_from(lines), st.integers(0, 200), st.binary(max_size=6)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + len(t[2]) :]
    )


def test_ingest_kmsg_parsing_never_raises(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("kmsg")
    zones: list[tzinfo] = [UTC, ZoneInfo("Europe/Paris"), ZoneInfo("Pacific/Kiritimati")]

    @FUZZ
    @given(
        lines=st.lists(st.one_of(_kmsg_lines, _mutated(_SAMPLES_KMSG)), min_size=1, max_size=8),
        boot=st.none() | st.datetimes(datetime(1970, 1, 1), datetime(2999, 12, 31)),
        tz=st.sampled_from(zones),
        year=st.integers(1970, 9999),
    )
    def check(lines: list[bytes], boot: datetime | None, tz: tzinfo, year: int) -> None:
        path = folder / "kernel.log"
        path.write_bytes(b"\n".join(lines) + b"\n")
        ctx = LineContext(
            node="n",
            cluster="c",
            boot_time=None if boot is None else boot.replace(tzinfo=UTC),
            boot_id="b",
            tz=tz,
            year=year,
        )
        with FileReader(str(path)) as source:
            assumed = assumed_time(source, None)
            for record in read_xids(source, ctx, assumed):
                if not isinstance(record.event, RecordError):
                    encode(record.event)
        assumed.warning(str(path))

    check()


# -- ingest k8s ------------------------------------------------------------------------------
_K8S = [json.loads(p.read_text()) for p in sorted((paths.DATA / "k8s").glob("*.json"))]
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "2024-05-01T12:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths_of(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths_of(child, (*prefix, index))
    return found


def _replaced(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(doc))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


@st.composite
def k8s_documents(draw: st.DrawFn) -> bytes:
    doc = draw(st.sampled_from(_K8S))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(_paths_of(doc)))
        doc = _replaced(doc, where, draw(_json))
    wrap = draw(st.sampled_from(["plain", "watch", "list"]))
    if wrap == "watch":
        doc = {
            "type": draw(st.sampled_from(["ADDED", "DELETED", "BOOKMARK", "x", 1])),
            "object": doc,
        }
    elif wrap == "list":
        doc = {"kind": draw(st.sampled_from(["List", "PodList", "NodeList"])), "items": [doc]}
    return json.dumps(doc).encode()


def test_ingest_k8s_parsing_never_raises(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("k8s")
    keep = GpuFilter(DEFAULT_CONFIG).keep

    @FUZZ
    @given(
        lines=st.lists(
            st.one_of(
                k8s_documents(), _json.map(lambda v: json.dumps(v).encode()), st.binary(max_size=80)
            ),
            min_size=1,
            max_size=4,
        ),
        pretty=st.booleans(),
    )
    def check(lines: list[bytes], pretty: bool) -> None:
        path = folder / "objects.json"
        data = b"\n".join(lines) + b"\n"
        if pretty and lines:
            with contextlib.suppress(ValueError):
                data = json.dumps(json.loads(lines[0]), indent=2).encode()
        path.write_bytes(data)
        with FileReader(str(path)) as source:
            for record in slim_documents(source, cluster="c", config=DEFAULT_CONFIG):
                event = record.event
                if event is not None and not isinstance(event, RecordError):
                    keep(event)
                    encode(event)

    check()


# -- ingest dcgm -----------------------------------------------------------------------------
_SAMPLES_DCGM = [
    line.encode()
    for p in sorted((paths.DATA / "dcgm").rglob("*.prom"))
    for line in p.read_text().splitlines()
    if line.strip()
]
_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e999", "-1e999", "0x10", "", "79"]),
)
_dcgm_lines = st.one_of(
    st.builds(
        lambda name, uuid, extra, value, stamp: (
            f'{name}{{gpu="0",UUID="{uuid}"{extra}}} {value}{stamp}'.encode()
        ),
        st.sampled_from(
            ["DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_GPU_TEMP"]
        ),
        st.sampled_from(["GPU-0", "GPU-1", ""]),
        st.sampled_from(
            [
                "",
                ',xid="79"',
                ',xid="x"',
                ',GPU_I_ID="1"',
                ',GPU_I_ID="999999"',
                ',pci_bus_id="zz"',
                ',pod="p",namespace="ns"',
                ',exported_pod="q"',
                ',window_size_in_ms="5000"',
            ]
        ),
        _VALUES,
        st.one_of(st.just(""), _VALUES.map(lambda v: f" {v}")),
    ),
    st.binary(max_size=80),
)


def test_ingest_dcgm_parsing_never_raises(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("dcgm")

    @FUZZ
    @given(
        scrapes=st.lists(
            st.lists(
                st.one_of(_dcgm_lines, _mutated(_SAMPLES_DCGM), st.sampled_from(_SAMPLES_DCGM)),
                max_size=8,
            ),
            min_size=1,
            max_size=3,
        )
    )
    def check(scrapes: list[list[bytes]]) -> None:
        files = []
        for index, lines in enumerate(scrapes):
            path = folder / f"{index}.prom"
            path.write_bytes(b"\n".join(lines) + b"\n")
            files.append(str(path))
        out, err = io.BytesIO(), io.StringIO()
        status = ingest_dcgm(files, cluster="c", node="n", out=out, err=err)
        assert status in (0, 1)
        assert "Traceback" not in err.getvalue()

    check()


def test_the_fuzz_writers_make_what_they_claim() -> None:
    """The TOML writer's output reads back equal (else the loader would see only errors)."""
    value = {"a": [1, 2.5, 'x"\\\x01\x7f'], "b": {"c": date(2024, 1, 2)}, "d": float("inf")}
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value
