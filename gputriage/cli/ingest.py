"""``gputriage ingest``: read a source's recorded data offline, print the typed events.

This is how a user checks what gputriage makes of their cluster's objects,
kernel logs and exporter scrapes, without Kafka: each command prints JSON
lines (one typed event per line) on stdout, and reports a bad line or object
as ``FILE:LINE: reason`` on stderr with exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

import click
import msgspec

from connectors.files import STDIN, Record
from connectors.k8s.settings import K8sSettings
from connectors.xid.settings import KmsgSettings
from gputriage.cli.common import (
    CONTEXT,
    TimeType,
    open_all,
    settings_of,
    slim_config,
    time_zone,
)
from gputriage.cli.options import settings_options
from gputriage.errors import PROG
from schemas.codec import RecordError, encode


@click.group("ingest", context_settings=CONTEXT)
def ingest_group() -> None:
    """Read a source's recorded data offline and print the typed events it makes.

    \b
    Examples:
      kubectl get pods -A -o json | gputriage ingest k8s --cluster prod --file -
      gputriage ingest kmsg --node n1 --file dmesg.txt
      gputriage ingest dcgm --node n1 --file scrape-1.txt --file scrape-2.txt
      gputriage ingest autoscaler --cluster prod --file ca.log --year 2026
      nvidia-smi topo -m | gputriage ingest topo --node n1 --file -
    """


F = TypeVar("F", bound=Callable[..., Any])


def _input_file(help: str) -> Callable[[F], F]:
    """The ``--file FILE`` every single-input verb takes (``-`` for stdin)."""
    return click.option(
        "--file",
        "path",
        metavar="FILE",
        required=True,
        type=click.Path(exists=True, dir_okay=False, allow_dash=True),
        help=help,
    )


@ingest_group.command("k8s", context_settings=CONTEXT)
@_input_file(
    'Watch events as JSON lines ({"type":..,"object":..}), objects one per line, '
    "or kubectl get -o json output (List or pretty-printed); plain or gzip; - for stdin."
)
@click.option("--cluster", required=True, help="Cluster name to put on every event.")
@settings_options(
    K8sSettings,
    only=("keep_all", "resources", "resource_prefixes", "gpu_drivers", "gpu_device_classes"),
)
@click.pass_context
def ingest_k8s_command(
    ctx: click.Context,
    *,
    path: str,
    cluster: str,
    keep_all: bool | None,
    resources: tuple[str, ...],
    resource_prefixes: tuple[str, ...],
    gpu_drivers: tuple[str, ...],
    gpu_device_classes: tuple[str, ...],
) -> int:
    """Slim recorded Kubernetes objects into typed events, printed as JSON lines.

    Pods and nodes are stamped with the newest status timestamp in the object (a
    recording has no receive time). The autoscalers' Events (TriggeredScaleUp,
    NotTriggerScaleUp, Karpenter's...) are also printed as autoscaler.v1 records,
    and DRA objects joined as the live connector joins them (list them before the
    pods). A bad line or object is reported as FILE:LINE on stderr and skipped;
    the exit status is then 1.

    \b
    Examples:
      kubectl get pods,nodes -A -o json | gputriage ingest k8s --cluster prod --file -
      kubectl get resourceclaims,pods -A -o json | gputriage ingest k8s --cluster prod --file -
      gputriage ingest k8s --cluster prod --keep-all --file watch-events.jsonl.gz
    """
    settings_of(ctx)  # an invalid --config is one line here too, as for every verb
    from connectors.autoscaler.kube_events import autoscaler_events  # noqa: PLC0415
    from connectors.k8s.dra import DraJoin  # noqa: PLC0415
    from connectors.k8s.gpu_filter import GpuFilter  # noqa: PLC0415
    from connectors.k8s.offline import joined, slim_documents  # noqa: PLC0415
    from schemas.events import KubeEvent  # noqa: PLC0415

    def derive(event: Any) -> tuple[Any, ...]:
        # As the live connector: an autoscaler's Event is also autoscaler.v1 records.
        return autoscaler_events(event) if isinstance(event, KubeEvent) else ()

    config = slim_config(resources, resource_prefixes, gpu_drivers, gpu_device_classes)
    gpu_only = None if keep_all else GpuFilter(config)
    (source,) = open_all([path])
    with source:
        records = joined(slim_documents(source, cluster=cluster, config=config), DraJoin(config))
        keep = gpu_only.keep if gpu_only is not None else None
        return _print_events(records, "object", keep, derive)


@ingest_group.command("kmsg", context_settings=CONTEXT)
@_input_file(
    "Kernel log: dmesg [-T | --time-format iso], syslog, journalctl -k [-o json], "
    "or /dev/kmsg records; plain or gzip; - for stdin."
)
@click.option("--node", required=True, help="Node name to put on every event.")
@click.option("--cluster", default="", help="Cluster name to put on every event.")
@click.option(
    "--boot-time",
    metavar="TIME",
    type=TimeType(epoch_seconds=True),
    help="When the node booted (RFC 3339, or btime from /proc/stat): needed for times "
    "relative to boot (dmesg [secs], kmsg records).",
)
@click.option(
    "--default-time",
    metavar="TIME",
    type=TimeType(epoch_seconds=True),
    help="Time of XID lines whose prefix gives none that can be used (none at all, [...], "
    "[secs] without --boot-time); default: the file's modification time, for a pipe the "
    "time of reading. One warning on stderr says which lines got it.",
)
@click.option("--boot-id", default="", help="Boot id of kmsg records (ids kmsg:NODE:BOOT:SEQ).")
@settings_options(KmsgSettings, only=("tz", "year"))
@click.pass_context
def ingest_kmsg_command(
    ctx: click.Context,
    *,
    path: str,
    node: str,
    cluster: str,
    boot_time: datetime | None,
    default_time: datetime | None,
    boot_id: str,
    tz: str | None,
    year: int | None,
) -> int:
    """Parse XID/SXid lines of a saved kernel log into typed events, printed as JSON lines.

    Other lines are skipped. A line that looks like an XID but cannot be read is
    reported as FILE:LINE on stderr; the exit status is then 1. A line whose
    prefix gives no usable time (lines pasted from a bug report) is not refused:
    it gets --default-time, else the file's modification time, and one warning
    line on stderr says how many lines that was and where the first one is.

    \b
    Examples:
      dmesg --ctime | gputriage ingest kmsg --node n1 --file -
      gputriage ingest kmsg --node n1 --file /var/log/kern.log --tz Europe/Paris --year 2026
      gputriage ingest kmsg --node n1 --file dmesg.txt --boot-time 2026-11-30T08:00:00Z
      gputriage ingest kmsg --node n1 --file pasted.txt --default-time 2026-11-30T09:00:00Z
    """
    settings_of(ctx)  # an invalid --config is one line here too, as for every verb
    from datetime import UTC  # noqa: PLC0415

    from connectors.xid.lines import LineContext  # noqa: PLC0415
    from connectors.xid.offline import assumed_time, read_xids  # noqa: PLC0415

    lines = LineContext(
        node=node,
        cluster=cluster,
        boot_time=boot_time,
        boot_id=boot_id,
        tz=time_zone(tz or KmsgSettings().tz),
        year=year or datetime.now(UTC).year,
    )
    (source,) = open_all([path])
    with source:
        assumed = assumed_time(source, default_time)
        status = _print_events(read_xids(source, lines, assumed), "XID line")
    warning = assumed.warning(source.name)
    if warning is not None:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    return status


@ingest_group.command("dcgm", context_settings=CONTEXT)
@click.option(
    "--file",
    "paths",
    metavar="FILE",
    required=True,
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="A saved dcgm-exporter /metrics scrape (plain or gzip; - for stdin). Repeat it for "
    "successive scrapes, oldest first: one file is one scrape.",
)
@click.option("--node", required=True, help="Node name to put on every event.")
@click.option("--cluster", default="", help="Cluster name to put on every event.")
@click.pass_context
def ingest_dcgm_command(
    ctx: click.Context, *, paths: tuple[str, ...], node: str, cluster: str
) -> int:
    """Diff saved dcgm-exporter scrapes into XID and GPU binding events, printed as JSON lines.

    Events are stamped with the file's modification time (or its samples'
    timestamps). The first scrape of each GPU is a baseline: its bindings are
    printed, a non-zero XID gauge or count is not (it may be hours old). A file
    that is not an exposition is reported on stderr and skipped; the exit status
    is then 1.

    \b
    Examples:
      curl -s http://n1:9400/metrics > scrape-2.txt
      gputriage ingest dcgm --node n1 --file scrape-1.txt --file scrape-2.txt
    """
    settings_of(ctx)  # an invalid --config is one line here too, as for every verb
    from connectors.dcgm.offline import ingest_dcgm  # noqa: PLC0415

    if paths.count(STDIN) > 1:
        raise click.BadParameter("stdin (-) can be read only once", param_hint="--file")
    return ingest_dcgm(paths, cluster=cluster, node=node, out=sys.stdout.buffer, err=sys.stderr)


@ingest_group.command("autoscaler", context_settings=CONTEXT)
@_input_file(
    "cluster-autoscaler (klog) or Karpenter (JSON or console) log, raw or wrapped "
    "(kubectl --prefix/--timestamps, docker json-file, CRI, JSON klog), their Events as "
    "pasted (kubectl describe or get events rows, bare messages), or GKE cluster "
    "autoscaler visibility entries from Cloud Logging (one JSON entry per line); plain "
    "or gzip; - for stdin."
)
@click.option("--cluster", required=True, help="Cluster name to put on every record.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "klog", "karpenter", "gke"]),
    default="auto",
    show_default=True,
    help="Log format; auto tells them apart line by line. gke: the Cloud Logging log "
    "container.googleapis.com/cluster-autoscaler-visibility (GKE runs the autoscaler "
    "on its control plane: no pod log to read).",
)
@click.option(
    "--year",
    type=click.IntRange(1970, 9999),
    default=None,
    help="Year of every klog line (klog prints none). Exclusive with --reference-time.",
)
@click.option(
    "--reference-time",
    metavar="TIME",
    type=TimeType(),
    default=None,
    help="klog lines take the year that puts them nearest this time (a log spanning "
    "New Year works); default: the file's modification time, for a pipe now.",
)
@click.option(
    "--cloud",
    type=click.Choice(["aws", "gce", "azure"]),
    default=None,
    help="Cloud to record when a line does not show one.",
)
@click.pass_context
def ingest_autoscaler_command(
    ctx: click.Context,
    *,
    path: str,
    cluster: str,
    fmt: str,
    year: int | None,
    reference_time: datetime | None,
    cloud: str | None,
) -> int:
    """Parse a saved autoscaler log into autoscaler.v1 records, printed as JSON lines.

    Also reads Events as pasted (kubectl describe, get events, bare messages). Lines stating
    no fact are counted on stderr; an unreadable klog line is FILE:LINE on stderr, exit 1.

    \b
    Examples:
      kubectl logs -n kube-system deploy/cluster-autoscaler | \\
        gputriage ingest autoscaler --cluster prod --file -
      gputriage ingest autoscaler --cluster prod --file ca.log --year 2026
      gputriage ingest autoscaler --cluster prod --format karpenter --file karpenter.jsonl
      gcloud logging read --format=json \\
          'log_id("container.googleapis.com/cluster-autoscaler-visibility")' | jq -c '.[]' | \\
        gputriage ingest autoscaler --cluster prod --format gke --file -
    """
    settings_of(ctx)  # an invalid --config is one line here too, as for every verb
    from connectors.autoscaler.lines import LineContext  # noqa: PLC0415
    from connectors.autoscaler.offline import (  # noqa: PLC0415
        Counts,
        default_reference,
        read_autoscaler,
        year_reference,
    )

    if year is not None and reference_time is not None:
        raise click.UsageError("give --year or --reference-time, not both")
    (source,) = open_all([path])
    with source:
        if year is not None:
            reference = year_reference(year)
        else:
            reference = reference_time or default_reference(source)
        lines = LineContext(
            cluster=cluster,
            reference=reference,
            source=source.name,
            cloud=cloud or "",
            fmt=_autoscaler_format(fmt),
        )
        counts = Counts()
        status = _print_events(read_autoscaler(source, lines, counts), "autoscaler line")
    print(
        f"{PROG}: {source.name}: {counts.lines} lines, {counts.records} records, "
        f"{counts.unrecognised} unrecognised, {counts.bad} bad",
        file=sys.stderr,
    )
    return status


@ingest_group.command("topo", context_settings=CONTEXT)
@_input_file(
    "Saved nvidia-smi topo -m (or -mp) output, as printed or pasted; plain or gzip; - for stdin."
)
@click.option("--node", required=True, help="Node name to put on the record.")
@click.option("--cluster", default="", help="Cluster name to put on the record.")
@click.option(
    "--time",
    "when",
    metavar="TIME",
    type=TimeType(epoch_seconds=True),
    default=None,
    help="When the output was taken (RFC 3339); default: the file's modification time, "
    "for a pipe the time of reading.",
)
@click.pass_context
def ingest_topo_command(
    ctx: click.Context, *, path: str, node: str, cluster: str, when: datetime | None
) -> int:
    """Parse a GPU topology matrix into one gpu_topology.v1 record, printed as a JSON line.

    Every GPU pair once (src_gpu < dst_gpu) with its link type as printed (NV18, PIX,
    PXB, PHB, NODE, SYS, SOC) and its NVLink count; every GPU's NUMA node and CPU
    affinity. NIC rows and the legends are read past. A file without a readable matrix
    is one line on stderr; the exit status is then 1.

    \b
    Examples:
      gputriage ingest topo --node n1 --file topo.txt --time 2026-11-30T09:00:00Z
      nvidia-smi topo -m | gputriage ingest topo --node n1 --cluster prod --file -
    """
    settings_of(ctx)  # an invalid --config is one line here too, as for every verb
    from connectors.topology.offline import ingest_topology  # noqa: PLC0415

    return ingest_topology(
        path, cluster=cluster, node=node, time=when, out=sys.stdout.buffer, err=sys.stderr
    )


def _autoscaler_format(fmt: str) -> Literal["auto", "klog", "karpenter", "gke"]:
    """The ``--format`` choice as the parser's format literal."""
    if fmt == "klog":
        return "klog"
    if fmt == "karpenter":
        return "karpenter"
    if fmt == "gke":
        return "gke"
    return "auto"


class _Parsed(Protocol):
    """What the offline readers yield: where a record was, and what it became."""

    @property
    def source(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def event(self) -> msgspec.Struct | RecordError | None: ...


def _print_events(
    records: Iterable[_Parsed],
    what: str,
    keep: Callable[[Any], bool] | None = None,
    derive: Callable[[Any], tuple[Any, ...]] | None = None,
) -> int:
    """Print each event as a JSON line, each error as ``FILE:LINE: reason`` on stderr.

    ``None`` events (nothing to emit, e.g. a BOOKMARK) and those ``keep`` refuses
    are skipped; what ``derive`` makes of an event (kept or not) follows it.
    Returns the exit status: 1 when any record was bad.
    """
    from gputriage.replay import bad_line_message  # noqa: PLC0415

    out = sys.stdout.buffer
    bad = total = 0
    for record in records:
        total += 1
        event = record.event
        if isinstance(event, RecordError):
            bad += 1
            message = bad_line_message(Record(record.source, record.line, event), event)
            print(message, file=sys.stderr)
            continue
        if event is None:
            continue
        if keep is None or keep(event):
            out.write(encode(event) + b"\n")
        for derived in derive(event) if derive is not None else ():
            out.write(encode(derived) + b"\n")
    out.flush()
    if bad:
        plural = "" if bad == 1 else "s"
        print(f"{PROG}: {bad} bad {what}{plural} of {total} skipped", file=sys.stderr)
    return 1 if bad else 0
