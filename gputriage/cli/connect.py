"""``gputriage connect``: the live source connectors, each publishing typed events to Kafka.

Every connector runs until SIGINT/SIGTERM, logs per ``[log]``, serves
Prometheus metrics on its own port (the processor uses 9464; kmsg 9465,
k8s 9466, dcgm 9467 by default, so they can share a node's network), and
sends what it cannot read to the dead-letter topic instead of dying.

Every option can also come from the settings: ``[connect.<source>]`` tables
in the file, or ``GPUTRIAGE_CONNECT__<SOURCE>__<OPTION>`` variables (option
names with ``_`` for ``-``), which become the options' defaults; the command
line still wins. Trap: click ignores unknown keys of a ``default_map``, so
:func:`connect_defaults` checks them, or a typo would silently do nothing.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from connectors.xid.journal import JOURNALCTL
from connectors.xid.kmsg import BOOT_ID_PATH, DEFAULT_STATE, DEVICE, PROC_STAT
from gputriage.cli.common import (
    CONTEXT,
    boot_time_option,
    brokers_option,
    cluster_option,
    error,
    gpu_resource_options,
    http_url_option,
    kafka_kwargs,
    metrics_port_option,
    node_option,
    settings_of,
    slim_config,
    start_logging,
    tz_option,
    year_option,
)
from schemas.topics import topic_layout

if TYPE_CHECKING:
    from connectors.kafka.producer import KafkaTarget
    from gputriage.settings import Settings


@click.group("connect", context_settings=CONTEXT)
def connect_group() -> None:
    """Run a live source connector: read a source, publish typed events to the raw topics."""


@connect_group.command("k8s", context_settings=CONTEXT)
@cluster_option
@click.option("--namespace", help="Watch pods and Events of one namespace (default: all).")
@click.option(
    "--kubeconfig",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).",
)
@click.option("--context", "kube_context", help="Kubeconfig context (default: the current one).")
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@gpu_resource_options
@brokers_option
@metrics_port_option(9466)
@click.option(
    "--buffer",
    "buffer_size",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Events held while the broker is slow or down; then the watch waits.",
)
@click.option(
    "--silence-timeout",
    type=click.FloatRange(min=1.0),
    default=300.0,
    show_default=True,
    help="Reconnect a watch that sent nothing (not even a bookmark) for this many seconds.",
)
@click.option(
    "--leader-election",
    is_flag=True,
    help="Only the holder of a coordination.k8s.io Lease works (run several replicas).",
)
@click.option(
    "--lease-namespace",
    help="Namespace of the Lease (default: the pod's own, in-cluster).",
)
@click.option(
    "--lease-name", default="gputriage-connect-k8s", show_default=True, help="Name of the Lease."
)
@click.option("--identity", help="This replica's name in the Lease (default: $HOSTNAME_pid).")
@click.pass_context
def connect_k8s_command(
    ctx: click.Context,
    *,
    cluster: str,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    in_cluster: bool,
    keep_all: bool,
    resources: tuple[str, ...],
    prefixes: tuple[str, ...],
    brokers: str | None,
    metrics_port: int,
    buffer_size: int,
    silence_timeout: float,
    leader_election: bool,
    lease_namespace: str | None,
    lease_name: str,
    identity: str | None,
) -> int:
    """Watch pods, nodes and Events and publish them to the raw topics, until Ctrl-C or SIGTERM.

    Lists, then watches with bookmarks; relists on 410 Gone and emits what changed
    meanwhile (deletions included); backs off on API errors. When the broker is
    down the watch waits (bounded buffer) and nothing is lost. Objects that cannot
    be slimmed go to the dead-letter topic.
    """
    from connectors.k8s.leader import LeaseOptions  # noqa: PLC0415
    from connectors.k8s.run import (  # noqa: PLC0415
        ConnectError,
        ConnectOptions,
        default_identity,
        run_connect,
        service_account_namespace,
    )
    from connectors.k8s.watch import WatchOptions  # noqa: PLC0415

    if in_cluster and (kubeconfig or kube_context):
        raise click.UsageError("--in-cluster does not go with --kubeconfig/--context")
    watch = WatchOptions(namespace=namespace, silence_timeout_s=silence_timeout)
    lease = None
    if leader_election:
        lease_ns = lease_namespace or service_account_namespace()
        if not lease_ns:
            raise click.UsageError("--leader-election needs --lease-namespace outside a pod")
        lease = LeaseOptions(
            namespace=lease_ns, name=lease_name, identity=identity or default_identity()
        )
    options = ConnectOptions(
        cluster=cluster,
        kubeconfig=kubeconfig,
        context=kube_context,
        in_cluster=in_cluster,
        gpu_only=not keep_all,
        slim=slim_config(resources, prefixes),
        watch=watch,
        buffer_size=buffer_size,
        lease=lease,
    )
    settings = settings_of(ctx)
    kwargs = kafka_kwargs(settings, brokers)
    layout = topic_layout(settings.topic_settings())
    start_logging(settings)
    try:
        return asyncio.run(run_connect(options, kwargs, layout, metrics_port=metrics_port))
    except ConnectError as exc:
        error(str(exc))
        return 1


@connect_group.command("kmsg", context_settings=CONTEXT)
@node_option
@cluster_option
@click.option("--device", default=DEVICE, show_default=True, help="The kmsg device.")
@click.option(
    "--state",
    "state_path",
    metavar="FILE",
    default=DEFAULT_STATE,
    show_default=True,
    help="Where the boot id and last sequence number are kept (a hostPath in a DaemonSet).",
)
@click.option(
    "--boot-id-file",
    default=BOOT_ID_PATH,
    show_default=True,
    help="The current boot id.",
)
@click.option("--proc-stat", default=PROC_STAT, show_default=True, help="Where btime is read.")
@click.option(
    "--boot-time",
    metavar="TIME",
    callback=boot_time_option,
    help="Override the boot time (RFC 3339 or epoch seconds; default: btime).",
)
@brokers_option
@metrics_port_option(9465)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01, max=10.0),
    default=0.2,
    show_default=True,
    help="Seconds between reads when the device has nothing new.",
)
@click.option(
    "--journal",
    is_flag=True,
    help="Follow the journal's kernel entries (journalctl) instead of the device.",
)
@click.option("--journalctl", default=JOURNALCTL, show_default=True, help="With --journal.")
@click.option("--journal-dir", default="", help="With --journal: journalctl -D DIR.")
@click.option(
    "--file",
    "log_file",
    metavar="FILE",
    default="",
    help="Follow this kernel log file instead (dmesg -w, dmesg -T, syslog kern.log), "
    "like tail -F: rotation by rename or truncation is followed.",
)
@tz_option
@year_option
@click.option(
    "--nvml/--no-nvml",
    default=True,
    show_default=True,
    help="Put GPU uuids and indexes on XIDs from NVML's bus id map (where a driver is; "
    "without one, XIDs carry bus ids and GPU bindings name their GPUs).",
)
@click.option("--once", is_flag=True, help="Publish what the source holds now, then exit.")
@click.pass_context
def connect_kmsg_command(
    ctx: click.Context,
    *,
    node: str,
    cluster: str,
    device: str,
    state_path: str,
    boot_id_file: str,
    proc_stat: str,
    boot_time: datetime | None,
    brokers: str | None,
    metrics_port: int,
    poll_interval: float,
    journal: bool,
    journalctl: str,
    journal_dir: str,
    log_file: str,
    tz: tzinfo,
    year: int | None,
    nvml: bool,
    once: bool,
) -> int:
    """Read /dev/kmsg and publish XID/SXid events to the xids topic, until Ctrl-C or SIGTERM.

    Resumes after the last record handled (the state file), reports a reboot
    (new boot id) as a Rebooted event, and sends unreadable XID lines to the
    dead-letter topic. Run one per GPU node (a DaemonSet). With --journal it
    follows journalctl's kernel entries instead, resuming at the saved cursor;
    with --file a kernel log file, resuming at the saved inode and offset.
    """
    if journal and log_file:
        raise click.UsageError("--journal and --file are two different sources: choose one")
    import asyncio  # noqa: PLC0415

    from aiokafka.errors import KafkaError  # noqa: PLC0415

    from connectors.kafka.producer import KafkaUnreachable  # noqa: PLC0415
    from connectors.nvml.devices import enricher  # noqa: PLC0415
    from connectors.xid.run import KmsgOptions, run_kmsg  # noqa: PLC0415

    settings = settings_of(ctx)
    start_logging(settings)
    kwargs = kafka_kwargs(settings, brokers)
    layout = topic_layout(settings.topic_settings())
    options = KmsgOptions(
        node=node,
        cluster=cluster,
        device=device,
        state_path=state_path,
        boot_id_path=boot_id_file,
        proc_stat_path=proc_stat,
        boot_time=boot_time,
        journal=journal,
        journalctl=journalctl,
        journal_dir=journal_dir,
        poll_s=poll_interval,
        once=once,
        file=log_file,
        tz=tz,
        year=year,
        metrics_port=metrics_port,
    )
    try:
        # The xid family knows nothing of NVML: the GPU map is joined in here.
        enrich = enricher() if nvml else None
        return asyncio.run(run_kmsg(options, kwargs, layout, sys.stderr, enrich=enrich))
    except KafkaUnreachable as exc:  # at start: the DaemonSet restarts us
        error(str(exc))
        return 1
    except KafkaError as exc:  # failed mid-run, past the producer's retries
        error(f"Kafka: {exc!r}")
        return 1
    except OSError as exc:
        raise click.FileError(exc.filename or "?", hint=exc.strerror or str(exc)) from None
    except ValueError as exc:  # an unreadable btime or boot id
        error(str(exc))
        return 1


def _kafka_target(ctx: click.Context, brokers: str | None) -> KafkaTarget:
    """Settings -> the Kafka client arguments and topic layout of a connector."""
    from connectors.kafka.producer import KafkaTarget  # noqa: PLC0415

    settings = settings_of(ctx)
    return KafkaTarget(
        client_kwargs=kafka_kwargs(settings, brokers),
        layout=topic_layout(settings.topic_settings()),
    )


@connect_group.command("dcgm", context_settings=CONTEXT)
@click.option(
    "--url",
    required=True,
    metavar="URL",
    callback=http_url_option,
    help="The exporter's metrics URL, e.g. http://$NODE_IP:9400/metrics.",
)
@node_option
@cluster_option
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="Seconds between scrapes (keep it well under the exporter's XID count window).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds one scrape may take.",
)
@click.option(
    "--state",
    "state_path",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Keep the last scrape's state here, so a restart resumes instead of taking a "
    "baseline (XIDs during a baseline scrape are not reported).",
)
@brokers_option
@metrics_port_option(9467)
@click.pass_context
def connect_dcgm_command(
    ctx: click.Context,
    *,
    url: str,
    node: str,
    cluster: str,
    interval: float,
    timeout: float,
    state_path: Path | None,
    brokers: str | None,
    metrics_port: int,
) -> int:
    """Scrape dcgm-exporter and publish XID and GPU binding events, until Ctrl-C or SIGTERM.

    An XID is reported when DCGM_EXP_XID_ERRORS_COUNT grows (one event per new
    occurrence) or DCGM_FI_DEV_XID_ERRORS changes; a binding when a GPU's pod
    labels change. HTTP errors are retried with backoff; a body that is not an
    exposition goes to the dead-letter topic.
    """
    from connectors.dcgm.run import DcgmCommand, connect_dcgm  # noqa: PLC0415

    start_logging(settings_of(ctx))
    target = _kafka_target(ctx, brokers)
    command = DcgmCommand(
        url=url,
        cluster=cluster,
        node=node,
        interval_s=interval,
        timeout_s=timeout,
        state_path=state_path,
        metrics_port=metrics_port,
    )
    return connect_dcgm(command, target, sys.stderr)


@connect_group.command("nvml", context_settings=CONTEXT)
@node_option
@cluster_option
@click.option(
    "--bindings/--no-bindings",
    default=True,
    show_default=True,
    help="Publish the bus id <-> uuid <-> index map at start, as identity-only GPU "
    "bindings (pods_known=false: they never unbind what dcgm-exporter bound).",
)
@click.option("--once", is_flag=True, help="Publish the map, then exit (no XID watch).")
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the events as JSON lines instead of publishing them (no Kafka needed).",
)
@brokers_option
@click.pass_context
def connect_nvml_command(
    ctx: click.Context,
    *,
    node: str,
    cluster: str,
    bindings: bool,
    once: bool,
    print_only: bool,
    brokers: str | None,
) -> int:
    """Publish the GPU map and NVML XID critical-error events, until Ctrl-C or SIGTERM.

    Needs the NVIDIA driver: without one it says so in one line and exits 1.
    """
    from connectors.nvml.run import NvmlCommand, connect_nvml  # noqa: PLC0415

    start_logging(settings_of(ctx))
    command = NvmlCommand(
        cluster=cluster, node=node, once=once, bindings=bindings, print_only=print_only
    )
    # The Kafka settings are read only once NVML is known to work: on a node without a
    # driver, that is the one thing worth saying.
    return connect_nvml(command, lambda: _kafka_target(ctx, brokers), sys.stdout.buffer, sys.stderr)


def connect_defaults(settings: Settings) -> dict[str, Any]:
    """The ``[connect]`` table as click defaults, every source and option checked."""
    from gputriage.settings import SettingsError  # noqa: PLC0415

    table = settings.section("connect")
    for source, options in table.items():
        command = connect_group.commands.get(source)
        if command is None:
            known = ", ".join(sorted(connect_group.commands))
            raise SettingsError(f"unknown section connect.{source} (expected one of: {known})")
        if not isinstance(options, dict):
            raise SettingsError(f"connect.{source} must be a table")
        names = {p.name for p in command.params if p.name}
        for key in options:
            if key.replace("-", "_") not in names:
                raise SettingsError(
                    f"unknown key connect.{source}.{key} (see 'gputriage connect {source} --help')"
                )
    return {s: {k.replace("-", "_"): v for k, v in o.items()} for s, o in table.items()}
