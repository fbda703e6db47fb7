"""Parse one dcgm-exporter ``/metrics`` scrape into per-GPU samples (pure: no I/O, no clock).

The text format is parsed by prometheus-client's own parser, never by regular expressions
(label values may hold escaped quotes, commas and braces). A scrape is reduced, per GPU or
MIG instance, to its identity labels, the pods the exporter's pod mapper put on its series,
the ``DCGM_FI_DEV_XID_ERRORS`` gauge and the ``DCGM_EXP_XID_ERRORS_COUNT`` counts.

Traps (all seen in real output, ``tests/data/dcgm/``): label names differ between exporter
versions and flags; a MIG instance is (parent uuid, ``GPU_I_ID``), instance 0 exists, and
the profile is decoration; there is no per-code "active XID" gauge; ``err_code``/``err_msg``
are values, not identity; a shared GPU's pods are the union over its series; scraped
through Prometheus, ``exported_pod`` wins over ``pod`` (the exporter's own pod), label by
label, and an all-idle scrape cannot reveal it. Each trap with its source:
docs/connectors.md, design notes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from schemas.codec import RecordError
from schemas.events import PodRef
from schemas.pci import canonical_bus_id
from schemas.types import MAX_LABEL_LENGTH, MAX_NAME_LENGTH, MAX_NODE_PODS, MAX_XID_CODE

XID_GAUGE: Final = "DCGM_FI_DEV_XID_ERRORS"
"""Value of the *last* XID of the GPU (0: none since the exporter started). Last-value
only: a second XID with the same code, or a burst between two scrapes, is invisible."""
XID_COUNT: Final = "DCGM_EXP_XID_ERRORS_COUNT"
"""Per GPU and ``xid`` code, how many XIDs DCGM saw in the last ``window_size_in_ms``
(NVIDIA/dcgm-exporter#239, off by default). A sliding-window count: it falls as old XIDs age
out and resets to 0 when the exporter restarts, so only its growth means new XIDs."""

UUID_LABELS: Final = ("UUID", "uuid")
BUS_LABELS: Final = ("pci_bus_id", "PCI_BUS_ID")
HOST_LABELS: Final = ("Hostname", "hostname")
MODEL_LABELS: Final = ("modelName", "model_name")
POD_LABELS: Final = ("pod", "namespace", "container")
"""The pod mapper's labels (``podAttribute``... in the exporter's transformation/const.go)."""
OLD_POD_LABELS: Final = ("pod_name", "pod_namespace", "container_name")
"""The same with ``--use-old-namespace``."""
EXPORTED: Final = "exported_"
"""The prefix Prometheus (``honor_labels: false``) gives a scraped label that clashes
with a target label."""
MIG_ID_LABEL: Final = "GPU_I_ID"
MIG_PROFILE_LABEL: Final = "GPU_I_PROFILE"
_MAX_INSTANCE_DIGITS: Final = 5
"""GPU instance ids are small (at most 14 on today's GPUs); the driver's are 16-bit."""
SKIP_LABELS: Final = ("nvlink", "nvswitch")
"""Series about a link or a switch, not about one GPU's own state."""


class GpuSample(msgspec.Struct, frozen=True, kw_only=True):
    """What one scrape says about one GPU or MIG instance."""

    key: str
    """``<uuid>`` for a whole GPU, ``<uuid>/GI<id>`` for a MIG instance."""
    uuid: str
    """The physical GPU's uuid (a MIG instance's parent)."""
    gpu_index: int | None = None
    pci_bus_id: str = ""
    """Canonical (``0000:9b:00.0``), or empty when the exporter does not say."""
    device: str = ""
    model: str = ""
    hostname: str = ""
    mig_instance: str = ""
    """``GPU_I_ID`` as written; empty for a whole GPU."""
    gpu_instance: int | None = None
    """``GPU_I_ID`` as a number (0 is an instance); None for a whole GPU."""
    mig_profile: str = ""
    """``GPU_I_PROFILE``, without DCGM's blank markers (``<<<NULL>>>``)."""
    pods: tuple[PodRef, ...] = ()
    """Every pod on any series of this GPU, sorted, without duplicates."""
    xid_last: int | None = None
    """The ``DCGM_FI_DEV_XID_ERRORS`` value; None when the gauge is not exported."""
    xid_text: str = ""
    """The gauge's ``err_msg`` label (exporter >= 3.3.8), e.g. ``GPU has fallen off the bus``."""
    xid_counts: dict[int, int] | None = None
    """``DCGM_EXP_XID_ERRORS_COUNT`` by code; None when the count metric is not exported,
    ``{}`` when it is but counts nothing."""
    window_ms: int | None = None
    """The count metric's ``window_size_in_ms``."""


class BadSample(msgspec.Struct, frozen=True, kw_only=True):
    """A sample left out of its scrape, and why (a dead letter of its own, the rest stands)."""

    series: str
    """The sample as ``name{label="value",...} value timestamp_ms``, for the reader."""
    reason: str
    field: str = ""


class Scrape(msgspec.Struct, frozen=True, kw_only=True):
    """One parsed scrape."""

    gpus: dict[str, GpuSample]
    """By :attr:`GpuSample.key`, in order of first appearance."""
    time: datetime | None = None
    """The newest sample timestamp, when the exposition carries timestamps (dcgm-exporter
    does not; a recording made through a tool that adds them does)."""
    series: int = 0
    """Samples read (for logs and metrics)."""
    bad: tuple[BadSample, ...] = ()
    """Samples left out: a timestamp that is not a time (``1e999``, ``NaN``, before 1970)."""


class _Gpu:
    """A mutable accumulator for one GPU while the families are read."""

    __slots__ = (
        "bus",
        "counts",
        "device",
        "host",
        "index",
        "last",
        "mig_id",
        "mig_profile",
        "model",
        "pods",
        "text",
        "uuid",
        "window",
    )

    def __init__(self, uuid: str, mig_id: str) -> None:
        self.uuid = uuid
        self.mig_id = mig_id
        self.mig_profile = ""
        self.index: int | None = None
        self.bus = ""
        self.device = ""
        self.model = ""
        self.host = ""
        self.pods: set[PodRef] = set()
        self.last: int | None = None
        self.text = ""
        self.counts: dict[int, int] | None = None
        self.window: int | None = None

    def freeze(self, key: str, targets: set[tuple[str, str]]) -> GpuSample:
        """``targets``: the (namespace, name) of Prometheus target pods (the exporter itself)."""
        held = (p for p in self.pods if (p.namespace, p.name) not in targets)
        pods = tuple(sorted(held, key=lambda p: (p.namespace, p.name, p.container)))
        return GpuSample(
            key=key,
            uuid=self.uuid,
            gpu_index=self.index,
            pci_bus_id=self.bus,
            device=self.device,
            model=self.model,
            hostname=self.host,
            mig_instance=self.mig_id,
            gpu_instance=int(self.mig_id) if self.mig_id else None,
            mig_profile=self.mig_profile,
            pods=pods,
            xid_last=self.last,
            xid_text=self.text,
            xid_counts=self.counts,
            window_ms=self.window,
        )


def gpu_key(uuid: str, mig_instance: str) -> str:
    """The identity of a GPU (``uuid``) or of a MIG instance (``uuid/GI<id>``)."""
    return f"{uuid}/GI{mig_instance}" if mig_instance else uuid


def _first(labels: Mapping[str, str], names: tuple[str, ...]) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


def _int(value: float, what: str) -> int:
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise RecordError(f"{what} is not a non-negative integer: {value!r}", what)
    return int(value)


_LATEST_SECONDS: Final = 32_503_680_000.0
"""3000-01-01T00:00:00Z in epoch seconds: a sample stamped later is not a real time."""


def _timestamp_problem(stamp: float) -> str | None:
    """Why a sample's timestamp (epoch seconds) is not a usable time, or ``None``."""
    if not math.isfinite(stamp):
        return f"sample timestamp {stamp * 1000!r} ms is not a finite number"
    if not 0 <= stamp < _LATEST_SECONDS:
        return f"sample timestamp {stamp * 1000:.0f} ms is not a time from 1970 to 2999"
    return None


def _spelled(name: str, labels: Mapping[str, str], value: float, stamp: float) -> str:
    """A sample as the exposition line it came from (near enough: for a dead letter)."""
    pairs = ",".join(
        '{}="{}"'.format(k, v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
        for k, v in labels.items()
    )
    return f"{name}{{{pairs}}} {value!r} {stamp * 1000!r}"


def parse_exposition(text: str) -> Scrape | RecordError:
    """Parse one scrape; a malformed exposition is a :class:`RecordError`, never an exception.

    An exposition without a single GPU series is an error too: it is not a
    dcgm-exporter scrape (a wrong URL, an HTML error page that came with 200).
    """
    try:
        return _parse(text)
    except RecordError as exc:
        return exc
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        # prometheus-client raises ValueError (sometimes wrapping others) on bad text.
        return RecordError(f"invalid Prometheus text exposition: {exc}")


def _parse(text: str) -> Scrape:
    gpus: dict[str, _Gpu] = {}
    bad: list[BadSample] = []
    targets: set[tuple[str, str]] = set()
    newest: float | None = None
    series = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series += 1
            labels = sample.labels
            if sample.timestamp is not None:
                stamp = float(sample.timestamp)
                problem = _timestamp_problem(stamp)
                if problem is not None:  # this sample out, never the whole scrape
                    spelled = _spelled(sample.name, labels, sample.value, stamp)
                    bad.append(BadSample(series=spelled, reason=problem, field="timestamp"))
                    continue
                newest = stamp if newest is None else max(newest, stamp)
            uuid = _first(labels, UUID_LABELS)
            if not uuid or any(name in labels for name in SKIP_LABELS):
                continue
            mig_id = labels.get(MIG_ID_LABEL, "")
            if mig_id and not (
                mig_id.isascii() and mig_id.isdigit() and len(mig_id) <= _MAX_INSTANCE_DIGITS
            ):
                raise RecordError(
                    f"{MIG_ID_LABEL} {mig_id[:20]!r} is not a GPU instance id", MIG_ID_LABEL
                )
            mig_id = str(int(mig_id)) if mig_id else ""  # "03" and "3" are one instance
            key = gpu_key(uuid, mig_id)
            gpu = gpus.get(key)
            if gpu is None:
                gpu = gpus[key] = _Gpu(uuid, mig_id)
            _identity(gpu, labels)
            _pods(gpu, labels, targets)
            name = sample.name
            if name == XID_GAUGE:
                gpu.last = _code(_int(sample.value, f"{XID_GAUGE}{{UUID={uuid!r}}}"), XID_GAUGE)
                gpu.text = labels.get("err_msg", "")
            elif name == XID_COUNT:
                _count(gpu, labels, sample.value)
    if not gpus and bad:
        raise RecordError(
            f"no usable GPU series ({len(bad)} sample(s) left out; first: {bad[0].reason})"
        )
    if not gpus:
        raise RecordError("no GPU series (no sample has a UUID label): not a dcgm-exporter scrape")
    time = None if newest is None else datetime.fromtimestamp(newest, UTC)
    frozen = {k: g.freeze(k, targets) for k, g in gpus.items()}
    for gpu_sample in frozen.values():
        _check_pods(gpu_sample)
    return Scrape(gpus=frozen, time=time, series=series, bad=tuple(bad))


def _identity(gpu: _Gpu, labels: Mapping[str, str]) -> None:
    if gpu.index is None:
        index = labels.get("gpu", "")
        if index.isascii() and index.isdigit() and len(index) <= _MAX_INSTANCE_DIGITS:
            gpu.index = int(index)  # an NVML index is as small as an instance id; else unknown
    if not gpu.bus:
        raw = _first(labels, BUS_LABELS)
        if raw:
            bus = canonical_bus_id(raw)
            if not bus:
                raise RecordError(f"pci_bus_id {raw!r} is not a PCI bus id", "pci_bus_id")
            gpu.bus = bus
    gpu.device = gpu.device or labels.get("device", "")
    gpu.model = gpu.model or _first(labels, MODEL_LABELS)
    gpu.host = gpu.host or _first(labels, HOST_LABELS)
    if not gpu.mig_profile:
        profile = labels.get(MIG_PROFILE_LABEL, "")
        gpu.mig_profile = "" if _is_blank(profile) else profile


def _is_blank(value: str) -> bool:
    """DCGM's markers for a value it does not have: ``<<<NULL>>>``, ``<<<NOT_SUPPORTED>>>``..."""
    return value.startswith("<<<") and value.endswith(">>>")


def _pods(gpu: _Gpu, labels: Mapping[str, str], targets: set[tuple[str, str]]) -> None:
    """Add the series' workload pod to ``gpu``; record a Prometheus target pod in ``targets``.

    Precedence: ``exported_*`` (renamed by Prometheus), then the old-namespace
    labels (the exporter writes either family, never both, so a plain ``pod``
    beside ``pod_name`` is a target label), then plain ``pod``.
    """
    pod_label, namespace_label, container_label = POD_LABELS
    plain = labels.get(pod_label, "")
    exported = labels.get(EXPORTED + pod_label, "")
    old = labels.get(OLD_POD_LABELS[0], "")
    if exported:
        gpu.pods.add(
            PodRef(
                namespace=_exported(labels, namespace_label),
                name=exported,
                container=_exported(labels, container_label),
            )
        )
        if plain:
            # The target's namespace is plain ``namespace`` only if it clashed too.
            renamed = bool(labels.get(EXPORTED + namespace_label))
            targets.add((labels.get(namespace_label, "") if renamed else "", plain))
    elif old:
        gpu.pods.add(
            PodRef(
                namespace=labels.get(OLD_POD_LABELS[1], ""),
                name=old,
                container=labels.get(OLD_POD_LABELS[2], ""),
            )
        )
        if plain:
            targets.add((labels.get(namespace_label, ""), plain))
    elif plain:
        gpu.pods.add(
            PodRef(
                namespace=_exported(labels, namespace_label),
                name=plain,
                container=_exported(labels, container_label),
            )
        )


def _exported(labels: Mapping[str, str], name: str) -> str:
    """``exported_<name>`` when Prometheus renamed it, else ``<name>``."""
    return labels.get(EXPORTED + name, "") or labels.get(name, "")


def _count(gpu: _Gpu, labels: Mapping[str, str], value: float) -> None:
    if gpu.counts is None:
        gpu.counts = {}
    window = labels.get("window_size_in_ms", "")
    if window.isdigit():
        gpu.window = int(window)
    code = labels.get("xid", "")
    if not code:
        return  # the exporter's zero series for a GPU without XIDs in the window
    if not code.isdigit():
        raise RecordError(f"{XID_COUNT} has a non-numeric xid label {code!r}", "xid")
    if len(code) > len(str(MAX_XID_CODE)) or int(code) > MAX_XID_CODE:
        raise RecordError(f"{XID_COUNT} has an xid label out of range {code[:20]!r}", "xid")
    number = int(code)
    count = _int(value, f"{XID_COUNT}{{xid={code!r}}}")
    # MIG instances repeat the device-level count; several series of one code: keep the max.
    gpu.counts[number] = max(count, gpu.counts.get(number, 0))


def _code(value: int, field: str) -> int:
    """``value`` if it can be an XID code (:data:`~schemas.types.MAX_XID_CODE`), else a
    RecordError: DCGM reports the driver's codes, so a larger one is a broken scrape."""
    if value > MAX_XID_CODE:
        raise RecordError(
            f"XID code {str(value)[:20]} out of range (at most {MAX_XID_CODE})", field
        )
    return value


def _check_pods(sample: GpuSample) -> None:
    """A RecordError for pods no node holds: more than a node runs, or labels that are no
    Kubernetes names (the exporter copies them from the kubelet, which never sends such)."""
    if len(sample.pods) > MAX_NODE_PODS:
        raise RecordError(
            f"{len(sample.pods)} pods on GPU {sample.uuid[:60]!r}: more than a node runs "
            f"({MAX_NODE_PODS})",
            "pod",
        )
    for pod in sample.pods:
        if (
            len(pod.name) > MAX_NAME_LENGTH
            or len(pod.namespace) > MAX_LABEL_LENGTH
            or len(pod.container) > MAX_LABEL_LENGTH
        ):
            raise RecordError(
                f"pod {pod.namespace[:63]}/{pod.name[:63]} is not a Kubernetes name", "pod"
            )
