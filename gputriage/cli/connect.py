"""``gputriage connect``: the live source connectors, each publishing typed events to Kafka.

Every connector runs until SIGINT/SIGTERM, logs per ``[log]``, serves
Prometheus metrics on its own port (the processor uses 9464; kmsg 9465,
k8s 9466, dcgm 9467, autoscaler 9468, podresources 9469 by default, so they can
share a node's network), and
sends what it cannot read to the dead-letter topic instead of dying.

Every option can also come from the settings: ``[connect.<source>]`` tables
in the file, or ``GPUTRIAGE_CONNECT__<SOURCE>__<OPTION>`` variables (the
parameter names of :mod:`gputriage.settings`' ``*ConnectSettings``, ``-`` or
``_``). Those structs own every default; the options here default to ``None``
("not given") and :func:`_merged` lays what was given over the settings, so
the command line wins.

Traps:

* ``--cluster``/``--node``/``--url`` are required, but not to click: a value
  may come from the settings, so the check runs after the merge
  (:func:`_require`, which asks :func:`connect_defaults`), with click's own
  "Missing option" wording (:class:`~gputriage.cli.common.SettingsRequired`
  keeps them marked required).
* Kafka unreachable at a connector's start is a
  :class:`~connectors.kafka.config.KafkaUnreachable` that no command here
  catches: :func:`gputriage.cli.run` reports it, once for every connector (exit 1).
* A flag can only be *given* (``--once``); ``--nvml/--no-nvml`` pairs are
  tri-state (``None`` when neither), so the settings can turn them either way.
* A typo in a ``[connect.<source>]`` table fails when the settings load (the
  structs forbid unknown fields), so it can never silently do nothing.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec

from connectors.state import StateInUse
from gputriage.cli.common import (
    CONTEXT,
    SettingsRequired,
    StructDefault,
    TimeType,
    brokers_option,
    cluster_option,
    gpu_resource_options,
    http_url,
    kafka_kwargs,
    metrics_port_option,
    node_option,
    setting_range,
    settings_of,
    shown,
    slim_config,
    start_logging,
    time_zone,
)
from gputriage.errors import error
from gputriage.settings import (
    AutoscalerConnectSettings,
    DcgmConnectSettings,
    K8sConnectSettings,
    KmsgConnectSettings,
    NvmlConnectSettings,
    PodResourcesConnectSettings,
    Settings,
    TopoConnectSettings,
    explicit,
)
from schemas.topics import topic_layout

if TYPE_CHECKING:
    from connectors.podresources.devices import GpuMap

T = TypeVar("T", bound=msgspec.Struct)


def _merged(ctx: click.Context, source: str, given: dict[str, Any]) -> Any:
    """``[connect.<source>]`` with the options that were given laid over it."""
    table = getattr(settings_of(ctx).connect, source)
    changes = {k: v for k, v in given.items() if v is not None and v != ()}
    try:
        return msgspec.structs.replace(table, **changes)
    except ValueError as exc:  # a table's own check (``tz: unknown time zone 'x'``)
        name, _, reason = str(exc).partition(": ")
        raise click.BadParameter(reason, param_hint=f"'--{name.replace('_', '-')}'") from None


def _require(ctx: click.Context, source: str, given: dict[str, Any], *names: str) -> None:
    """click's "Missing option" for a required value found neither given nor in the settings."""
    defaults = connect_defaults(settings_of(ctx)).get(source, {})
    for name in names:
        if given.get(name) is None and name not in defaults:
            raise click.UsageError(
                f"Missing option '--{name}' (or connect.{source}.{name} in the settings)"
            )


def _given(value: str | None) -> str:
    """A value :func:`_require` has checked (narrows ``str | None`` for the type checker)."""
    if value is None:  # pragma: no cover - _require ran first
        raise click.UsageError("a required option is missing")
    return value


@click.group("connect", context_settings=CONTEXT)
def connect_group() -> None:
    """Run a live source connector: read a source, publish typed events to the raw topics.

    \b
    Examples:
      gputriage connect k8s --cluster prod --in-cluster
      gputriage connect kmsg --cluster prod --node "$NODE_NAME"
      gputriage connect dcgm --cluster prod --node n1 --url http://10.0.0.5:9400/metrics
      gputriage connect nvml --cluster prod --node n1 --print --once
      gputriage connect podresources --cluster prod --node "$NODE_NAME"
      gputriage connect topo --cluster prod --node n1 --print --once
      gputriage connect autoscaler --cluster prod --in-cluster --state /var/lib/gputriage/ca.json
    """


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
@click.option("--in-cluster", is_flag=True, default=None, help="Use the pod's service account.")
@gpu_resource_options
@brokers_option
@metrics_port_option(K8sConnectSettings)
@click.option(
    "--buffer",
    "buffer_size",
    type=setting_range(K8sConnectSettings, "buffer_size"),
    cls=StructDefault,
    show_default=shown(K8sConnectSettings, "buffer_size"),
    help="Events held while the broker is slow or down; then the watch waits.",
)
@click.option(
    "--silence-timeout",
    type=setting_range(K8sConnectSettings, "silence_timeout"),
    cls=StructDefault,
    show_default=shown(K8sConnectSettings, "silence_timeout"),
    help="Reconnect a watch that sent nothing (not even a bookmark) for this many seconds.",
)
@click.option(
    "--leader-election",
    is_flag=True,
    default=None,
    help="Only the holder of a coordination.k8s.io Lease works (run several replicas).",
)
@click.option(
    "--lease-namespace",
    help="Namespace of the Lease (default: the pod's own, in-cluster).",
)
@click.option(
    "--lease-name",
    cls=StructDefault,
    show_default=shown(K8sConnectSettings, "lease_name"),
    help="Name of the Lease.",
)
@click.option("--identity", help="This replica's name in the Lease (default: $HOSTNAME_pid).")
@click.pass_context
def connect_k8s_command(ctx: click.Context, /, **given: Any) -> int:
    """Watch pods, nodes and Events and publish them to the raw topics, until Ctrl-C or SIGTERM.

    Lists, then watches with bookmarks; relists on 410 Gone and emits what changed
    meanwhile (deletions included); backs off on API errors. When the broker is
    down the watch waits (bounded buffer) and nothing is lost. Objects that cannot
    be slimmed go to the dead-letter topic.

    \b
    Examples:
      gputriage connect k8s --cluster prod --in-cluster
      gputriage connect k8s --cluster dev --context kind-dev --namespace ml
      gputriage connect k8s --cluster prod --in-cluster --leader-election
    """
    _require(ctx, "k8s", given, "cluster")
    o: K8sConnectSettings = _merged(ctx, "k8s", given)
    return run_connect_k8s(settings_of(ctx), o)


def run_connect_k8s(settings: Settings, o: K8sConnectSettings) -> int:
    """``connect k8s`` with its options merged: build the connector's options, run it."""
    import asyncio  # noqa: PLC0415

    from connectors.autoscaler.kube_events import derive  # noqa: PLC0415
    from connectors.k8s.leader import LeaseOptions  # noqa: PLC0415
    from connectors.k8s.run import (  # noqa: PLC0415
        ConnectError,
        ConnectOptions,
        default_identity,
        run_connect,
        service_account_namespace,
    )
    from connectors.k8s.watch import WatchOptions  # noqa: PLC0415

    if o.in_cluster and (o.kubeconfig or o.kube_context):
        raise click.UsageError("--in-cluster does not go with --kubeconfig/--context")
    watch = WatchOptions(namespace=o.namespace, silence_timeout_s=o.silence_timeout)
    lease = None
    if o.leader_election:
        lease_ns = o.lease_namespace or service_account_namespace()
        if not lease_ns:
            raise click.UsageError("--leader-election needs --lease-namespace outside a pod")
        lease = LeaseOptions(
            namespace=lease_ns, name=o.lease_name, identity=o.identity or default_identity()
        )
    options = ConnectOptions(
        cluster=_given(o.cluster),
        kubeconfig=o.kubeconfig,
        context=o.kube_context,
        in_cluster=o.in_cluster,
        gpu_only=not o.keep_all,
        slim=slim_config(o.resources, o.prefixes),
        watch=watch,
        buffer_size=o.buffer_size,
        heartbeat_seconds=o.heartbeat_seconds,
        lease=lease,
        # Autoscaler Events also become autoscaler.v1 records, GPU-related or not.
        derive=derive,
    )
    kwargs = kafka_kwargs(settings, o.brokers)
    layout = topic_layout(settings.topics)
    start_logging(settings)
    try:
        return asyncio.run(run_connect(options, kwargs, layout, metrics_port=o.metrics_port))
    except ConnectError as exc:
        error(str(exc))
        return 1


@connect_group.command("kmsg", context_settings=CONTEXT)
@node_option
@cluster_option
@click.option(
    "--device",
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "device"),
    help="The kmsg device.",
)
@click.option(
    "--state",
    "state_path",
    metavar="FILE",
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "state_path"),
    help="Where the boot id and last sequence number are kept (a hostPath in a DaemonSet).",
)
@click.option(
    "--boot-id-file",
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "boot_id_file"),
    help="The current boot id.",
)
@click.option(
    "--proc-stat",
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "proc_stat"),
    help="Where btime is read.",
)
@click.option(
    "--boot-time",
    metavar="TIME",
    type=TimeType(epoch_seconds=True),
    help="Override the boot time (RFC 3339 or epoch seconds; default: btime).",
)
@brokers_option
@metrics_port_option(KmsgConnectSettings)
@click.option(
    "--poll-interval",
    type=setting_range(KmsgConnectSettings, "poll_interval"),
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "poll_interval"),
    help="Seconds between reads when the device has nothing new.",
)
@click.option(
    "--journal",
    is_flag=True,
    default=None,
    help="Follow the journal's kernel entries (journalctl) instead of the device.",
)
@click.option(
    "--journalctl",
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "journalctl"),
    help="With --journal.",
)
@click.option("--journal-dir", help="With --journal: journalctl -D DIR.")
@click.option(
    "--file",
    "log_file",
    metavar="FILE",
    help="Follow this kernel log file instead (dmesg -w, dmesg -T, syslog kern.log), "
    "like tail -F: rotation by rename or truncation is followed.",
)
@click.option(
    "--tz",
    metavar="ZONE",
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "tz"),
    help="Time zone of dmesg -T and syslog times (the node's local zone).",
)
@click.option(
    "--year",
    type=click.IntRange(1970, 9999),
    help="Year of syslog times, which have none (default: this year).",
)
@click.option(
    "--nvml/--no-nvml",
    default=None,
    cls=StructDefault,
    show_default=shown(KmsgConnectSettings, "nvml"),
    help="Put GPU uuids and indexes on XIDs from NVML's bus id map (where a driver is; "
    "without one, XIDs carry bus ids and GPU bindings name their GPUs).",
)
@click.option(
    "--once", is_flag=True, default=None, help="Publish what the source holds now, then exit."
)
@click.pass_context
def connect_kmsg_command(ctx: click.Context, /, **given: Any) -> int:
    """Read /dev/kmsg and publish XID/SXid events to the xids topic, until Ctrl-C or SIGTERM.

    Resumes after the last record handled (the state file), reports a reboot
    (new boot id) as a Rebooted event, and sends unreadable XID lines to the
    dead-letter topic. Run one per GPU node (a DaemonSet). With --journal it
    follows journalctl's kernel entries instead, resuming at the saved cursor;
    with --file a kernel log file, resuming at the saved inode and offset.

    \b
    Examples:
      gputriage connect kmsg --cluster prod --node "$NODE_NAME"
      gputriage connect kmsg --cluster prod --node n1 --journal
      gputriage connect kmsg --cluster prod --node n1 --file /var/log/kern.log --tz Europe/Paris
      gputriage connect kmsg --cluster prod --node n1 --once --no-nvml
    """
    boot_time = given.pop("boot_time")
    _require(ctx, "kmsg", given, "node", "cluster")
    o: KmsgConnectSettings = _merged(ctx, "kmsg", given)
    if boot_time is None and o.boot_time is not None:
        try:
            boot_time = TimeType(epoch_seconds=True).convert(o.boot_time, None, None)
        except click.BadParameter as exc:
            raise click.BadParameter(exc.message, param_hint="connect.kmsg.boot_time") from None
    return run_connect_kmsg(settings_of(ctx), o, boot_time)


def run_connect_kmsg(settings: Settings, o: KmsgConnectSettings, boot_time: Any) -> int:
    """``connect kmsg`` with its options merged: build the connector's options, run it."""
    if o.journal and o.log_file:
        raise click.UsageError("--journal and --file are two different sources: choose one")
    import asyncio  # noqa: PLC0415

    from aiokafka.errors import KafkaError  # noqa: PLC0415

    from connectors.nvml.devices import enricher  # noqa: PLC0415
    from connectors.xid.run import KmsgOptions, run_kmsg  # noqa: PLC0415

    tz = time_zone(o.tz)
    start_logging(settings)
    kwargs = kafka_kwargs(settings, o.brokers)
    layout = topic_layout(settings.topics)
    options = KmsgOptions(
        node=_given(o.node),
        cluster=_given(o.cluster),
        device=o.device,
        state_path=o.state_path,
        boot_id_path=o.boot_id_file,
        proc_stat_path=o.proc_stat,
        boot_time=boot_time,
        journal=o.journal,
        journalctl=o.journalctl,
        journal_dir=o.journal_dir,
        poll_s=o.poll_interval,
        once=o.once,
        file=o.log_file,
        tz=tz,
        year=o.year,
        metrics_port=o.metrics_port,
    )
    options = replace(
        options, publish=replace(options.publish, heartbeat_seconds=o.heartbeat_seconds)
    )
    try:
        # The xid family knows nothing of NVML: the GPU map is joined in here.
        enrich = enricher() if o.nvml else None
        return asyncio.run(run_kmsg(options, kwargs, layout, sys.stderr, enrich=enrich))
    except KafkaError as exc:  # failed mid-run, past the producer's retries
        error(f"Kafka: {exc!r}")
        return 1
    except OSError as exc:
        if exc.filename is None:
            raise  # not a file of the options: the CLI's one line for it (exit 1)
        raise click.FileError(exc.filename, hint=exc.strerror or str(exc)) from None
    except (ValueError, StateInUse) as exc:  # an unreadable btime or boot id; a 2nd reader
        error(str(exc))
        return 1


@connect_group.command("dcgm", context_settings=CONTEXT)
@click.option(
    "--url",
    cls=SettingsRequired,
    required=True,
    metavar="URL",
    help="The exporter's metrics URL, e.g. http://$NODE_IP:9400/metrics.",
)
@node_option
@cluster_option
@click.option(
    "--interval",
    type=setting_range(DcgmConnectSettings, "interval"),
    cls=StructDefault,
    show_default=shown(DcgmConnectSettings, "interval"),
    help="Seconds between scrapes (keep it well under the exporter's XID count window).",
)
@click.option(
    "--timeout",
    type=setting_range(DcgmConnectSettings, "timeout"),
    cls=StructDefault,
    show_default=shown(DcgmConnectSettings, "timeout"),
    help="Seconds one scrape may take.",
)
@click.option(
    "--state",
    "state_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Keep the last scrape's state here, so a restart resumes instead of taking a "
    "baseline (XIDs during a baseline scrape are not reported).",
)
@brokers_option
@metrics_port_option(DcgmConnectSettings)
@click.pass_context
def connect_dcgm_command(ctx: click.Context, /, **given: Any) -> int:
    """Scrape dcgm-exporter and publish XID and GPU binding events, until Ctrl-C or SIGTERM.

    An XID is reported when DCGM_EXP_XID_ERRORS_COUNT grows (one event per new
    occurrence) or DCGM_FI_DEV_XID_ERRORS changes; a binding when a GPU's pod
    labels change. HTTP errors are retried with backoff; a body that is not an
    exposition goes to the dead-letter topic.

    \b
    Examples:
      gputriage connect dcgm --cluster prod --node n1 --url http://10.0.0.5:9400/metrics
      gputriage connect dcgm --cluster prod --node n1 --url http://n1:9400/metrics \\
          --state /var/lib/gputriage/dcgm.json
    """
    _require(ctx, "dcgm", given, "url", "node", "cluster")
    o: DcgmConnectSettings = _merged(ctx, "dcgm", given)
    return run_connect_dcgm(settings_of(ctx), o)


def run_connect_dcgm(settings: Settings, o: DcgmConnectSettings) -> int:
    """``connect dcgm`` with its options merged: build the connector's command, run it."""
    from connectors.dcgm.run import DcgmCommand, connect_dcgm  # noqa: PLC0415

    url = http_url(_given(o.url))
    start_logging(settings)
    kwargs = kafka_kwargs(settings, o.brokers)
    layout = topic_layout(settings.topics)
    command = DcgmCommand(
        url=url,
        cluster=_given(o.cluster),
        node=_given(o.node),
        interval_s=o.interval,
        timeout_s=o.timeout,
        state_path=Path(o.state_path) if o.state_path else None,
        metrics_port=o.metrics_port,
        heartbeat_seconds=o.heartbeat_seconds,
    )
    try:
        return connect_dcgm(command, kwargs, layout, sys.stderr)
    except StateInUse as exc:
        error(str(exc))
        return 1


@connect_group.command("nvml", context_settings=CONTEXT)
@node_option
@cluster_option
@click.option(
    "--bindings/--no-bindings",
    default=None,
    cls=StructDefault,
    show_default=shown(NvmlConnectSettings, "bindings"),
    help="Publish the bus id <-> uuid <-> index map at start, as identity-only GPU "
    "bindings (pods_known=false: they never unbind what dcgm-exporter bound).",
)
@click.option(
    "--once", is_flag=True, default=None, help="Publish the map, then exit (no XID watch)."
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    default=None,
    help="Print the events as JSON lines instead of publishing them (no Kafka needed).",
)
@brokers_option
@click.pass_context
def connect_nvml_command(ctx: click.Context, /, **given: Any) -> int:
    """Publish the GPU map and NVML XID critical-error events, until Ctrl-C or SIGTERM.

    Needs the NVIDIA driver: without one it says so in one line and exits 1.

    \b
    Examples:
      gputriage connect nvml --cluster prod --node "$NODE_NAME"
      gputriage connect nvml --cluster dev --node n1 --print --once
    """
    _require(ctx, "nvml", given, "node", "cluster")
    o: NvmlConnectSettings = _merged(ctx, "nvml", given)
    return run_connect_nvml(settings_of(ctx), o)


def run_connect_nvml(settings: Settings, o: NvmlConnectSettings) -> int:
    """``connect nvml`` with its options merged: build the connector's command, run it."""
    from connectors.kafka.producer import KafkaTarget  # noqa: PLC0415
    from connectors.nvml.run import NvmlCommand, connect_nvml  # noqa: PLC0415

    start_logging(settings)
    command = NvmlCommand(
        cluster=_given(o.cluster),
        node=_given(o.node),
        once=o.once,
        bindings=o.bindings,
        print_only=o.print_only,
        heartbeat_seconds=o.heartbeat_seconds,
    )
    # The Kafka settings are read only once NVML is known to work: on a node without a
    # driver, that is the one thing worth saying.
    return connect_nvml(
        command,
        lambda: KafkaTarget(kafka_kwargs(settings, o.brokers), topic_layout(settings.topics)),
        sys.stdout.buffer,
        sys.stderr,
    )


@connect_group.command("topo", context_settings=CONTEXT)
@node_option
@cluster_option
@click.option(
    "--interval",
    type=setting_range(TopoConnectSettings, "interval"),
    cls=StructDefault,
    show_default=shown(TopoConnectSettings, "interval"),
    help="Seconds between reads; a snapshot is published only when it changed.",
)
@click.option(
    "--nvml/--no-nvml",
    default=None,
    cls=StructDefault,
    show_default=shown(TopoConnectSettings, "nvml"),
    help="Read NVML where a driver is (else, or with --no-nvml, run nvidia-smi topo).",
)
@click.option(
    "--nvidia-smi",
    metavar="PATH",
    cls=StructDefault,
    show_default=shown(TopoConnectSettings, "nvidia_smi"),
    help="The nvidia-smi to run where NVML cannot be used.",
)
@click.option(
    "--timeout",
    type=setting_range(TopoConnectSettings, "timeout"),
    cls=StructDefault,
    show_default=shown(TopoConnectSettings, "timeout"),
    help="Seconds one nvidia-smi run may take (a hung driver hangs it).",
)
@metrics_port_option(TopoConnectSettings)
@click.option("--once", is_flag=True, default=None, help="Publish one snapshot, then exit.")
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    default=None,
    help="Print the records as JSON lines instead of publishing them (no Kafka needed).",
)
@brokers_option
@click.pass_context
def connect_topo_command(ctx: click.Context, /, **given: Any) -> int:
    """Publish the node's GPU topology (gpu_topology.v1) at start and on change.

    GPU pair links (NV<n>, PIX, PXB, PHB, NODE, SYS) and each GPU's NUMA node and CPU
    affinity, from NVML where a driver is, else from nvidia-smi topo -m (-mp if that
    fails). Read every --interval seconds; published only when it changed. A failed
    read is a dead letter and the next poll goes on. Neither NVML nor nvidia-smi: one
    line, exit 1.

    \b
    Examples:
      gputriage connect topo --cluster prod --node "$NODE_NAME"
      gputriage connect topo --cluster dev --node n1 --print --once
      gputriage connect topo --cluster dev --node n1 --no-nvml --nvidia-smi /usr/bin/nvidia-smi
    """
    _require(ctx, "topo", given, "node", "cluster")
    o: TopoConnectSettings = _merged(ctx, "topo", given)
    return run_connect_topo(settings_of(ctx), o)


def run_connect_topo(settings: Settings, o: TopoConnectSettings) -> int:
    """``connect topo`` with its options merged: build the connector's command, run it."""
    from connectors.kafka.producer import KafkaTarget  # noqa: PLC0415
    from connectors.topology.live import TopoCommand, connect_topo  # noqa: PLC0415

    start_logging(settings)
    command = TopoCommand(
        cluster=_given(o.cluster),
        node=_given(o.node),
        once=o.once,
        print_only=o.print_only,
        interval_seconds=o.interval,
        nvidia_smi=o.nvidia_smi,
        timeout_seconds=o.timeout,
        use_nvml=o.nvml,
        heartbeat_seconds=o.heartbeat_seconds,
        metrics_port=o.metrics_port,
    )
    return connect_topo(
        command,
        lambda: KafkaTarget(kafka_kwargs(settings, o.brokers), topic_layout(settings.topics)),
        sys.stdout.buffer,
        sys.stderr,
        open_nvml=open_nvml,
    )


def open_nvml(lib: Any = None) -> Any:
    """NVML opened for ``connect topo``, or why not (the topology source takes either)."""
    from connectors.nvml.devices import Nvml, NvmlUnavailable  # noqa: PLC0415

    try:
        return Nvml(lib).open()
    except NvmlUnavailable as exc:
        return str(exc)


@connect_group.command("autoscaler", context_settings=CONTEXT)
@cluster_option
@click.option(
    "--namespace",
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "namespace"),
    help="Namespace of the autoscaler's pods.",
)
@click.option(
    "--selector",
    metavar="LABELS",
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "selector"),
    help="Label selector of the autoscaler's pods (Karpenter: app.kubernetes.io/name=karpenter).",
)
@click.option(
    "--container",
    help="The container to follow (default: each pod's first container).",
)
@click.option(
    "--format",
    type=click.Choice(["auto", "klog", "karpenter"]),
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "format"),
    help="cluster-autoscaler's klog, Karpenter's JSON/console lines, or per line by content. "
    "karpenter is also a preset: selector app.kubernetes.io/name=karpenter and no status "
    "ConfigMap, unless given.",
)
@click.option(
    "--cloud",
    type=click.Choice(["aws", "gce", "azure"]),
    help="The cloud to record when a line shows none.",
)
@click.option(
    "--kubeconfig",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).",
)
@click.option("--context", "kube_context", help="Kubeconfig context (default: the current one).")
@click.option("--in-cluster", is_flag=True, default=None, help="Use the pod's service account.")
@click.option(
    "--state",
    "state_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Keep each followed container's last line here, so a restart resumes after it "
    "(without one, a restart reads each container's log from its start).",
)
@click.option(
    "--status-configmap",
    metavar="NAME",
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "status_configmap"),
    help="Watch this status ConfigMap in the namespace too ('' for none: Karpenter has none).",
)
@brokers_option
@metrics_port_option(AutoscalerConnectSettings)
@click.option(
    "--buffer",
    "buffer_size",
    type=setting_range(AutoscalerConnectSettings, "buffer_size"),
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "buffer_size"),
    help="Lines held while the broker is slow or down; then the log streams wait.",
)
@click.option(
    "--poll-interval",
    type=setting_range(AutoscalerConnectSettings, "poll_interval"),
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "poll_interval"),
    help="Seconds between listings of the pods (new replicas, restarts, deletions).",
)
@click.option(
    "--silence-timeout",
    type=setting_range(AutoscalerConnectSettings, "silence_timeout"),
    cls=StructDefault,
    show_default=shown(AutoscalerConnectSettings, "silence_timeout"),
    help="Reconnect a log stream that sent nothing for this many seconds.",
)
@click.pass_context
def connect_autoscaler_command(ctx: click.Context, /, **given: Any) -> int:
    """Follow the cluster-autoscaler's (or Karpenter's) pod logs and publish autoscaler.v1
    records, until Ctrl-C or SIGTERM.

    Follows every running pod matching the selector (only the leader logs decisions)
    through the API's pods/log; reconnects resume after the last line handed out, a
    restarted container is read from its start (and the old one's tail first). Lines
    that state no fact are counted, not sent; unreadable ones go to the dead-letter topic.
    Also watches the cluster-autoscaler-status ConfigMap and publishes its new facts.
    Needs get/list on pods, get on pods/log, get/list/watch on configmaps there.

    \b
    Examples:
      gputriage connect autoscaler --cluster prod --in-cluster --state /var/lib/gputriage/ca.json
      gputriage connect autoscaler --cluster dev --context kind-dev --format karpenter \\
          --namespace karpenter
    """
    _require(ctx, "autoscaler", given, "cluster")
    o: AutoscalerConnectSettings = _merged(ctx, "autoscaler", given)
    return run_connect_autoscaler_cli(settings_of(ctx), o)


KARPENTER_SELECTOR = "app.kubernetes.io/name=karpenter"
"""The label of the Karpenter chart's pods: ``--format karpenter``'s default selector."""


def autoscaler_options(o: AutoscalerConnectSettings) -> Any:
    """The connector's options (an ``AutoscalerConnectOptions``) from the merged settings,
    with the Karpenter preset applied where ``--format karpenter`` left a default."""
    from connectors.autoscaler.follow import FollowOptions  # noqa: PLC0415
    from connectors.autoscaler.run import AutoscalerConnectOptions  # noqa: PLC0415

    defaults = AutoscalerConnectSettings()
    selector, status_configmap = o.selector, o.status_configmap
    if o.format == "karpenter":  # the Karpenter preset, unless set otherwise
        if selector == defaults.selector:
            selector = KARPENTER_SELECTOR
        if status_configmap == defaults.status_configmap:
            status_configmap = ""  # Karpenter writes no status ConfigMap
    return AutoscalerConnectOptions(
        follow=FollowOptions(
            cluster=_given(o.cluster),
            namespace=o.namespace,
            selector=selector,
            container=o.container,
            fmt=o.format,
            cloud=o.cloud,
            poll_s=o.poll_interval,
            silence_timeout_s=o.silence_timeout,
        ),
        state_path=Path(o.state_path) if o.state_path else None,
        status_configmap=status_configmap,
        buffer_size=o.buffer_size,
        heartbeat_seconds=o.heartbeat_seconds,
        metrics_port=o.metrics_port,
    )


def run_connect_autoscaler_cli(settings: Settings, o: AutoscalerConnectSettings) -> int:
    """``connect autoscaler`` with its options merged: build the options and the client, run."""
    import asyncio  # noqa: PLC0415

    from connectors.autoscaler.run import run_connect_autoscaler  # noqa: PLC0415
    from connectors.k8s.run import ConnectError, ConnectOptions, kube_client  # noqa: PLC0415

    if o.in_cluster and (o.kubeconfig or o.kube_context):
        raise click.UsageError("--in-cluster does not go with --kubeconfig/--context")
    cluster = _given(o.cluster)
    options = autoscaler_options(o)
    kwargs = kafka_kwargs(settings, o.brokers)
    layout = topic_layout(settings.topics)
    start_logging(settings)
    kube = ConnectOptions(
        cluster=cluster, kubeconfig=o.kubeconfig, context=o.kube_context, in_cluster=o.in_cluster
    )

    async def main() -> int:
        # The client comes from the k8s family here: source families never import each other.
        api = await kube_client(kube)
        return await run_connect_autoscaler(options, api, kwargs, layout)

    try:
        return asyncio.run(main())
    except (ConnectError, StateInUse) as exc:
        error(str(exc))
        return 1


@connect_group.command("podresources", context_settings=CONTEXT)
@node_option
@cluster_option
@click.option(
    "--socket",
    metavar="TARGET",
    cls=StructDefault,
    show_default=shown(PodResourcesConnectSettings, "socket"),
    help="The kubelet's pod-resources endpoint (a kubelet with another --root-dir has it there).",
)
@click.option(
    "--interval",
    type=setting_range(PodResourcesConnectSettings, "interval"),
    cls=StructDefault,
    show_default=shown(PodResourcesConnectSettings, "interval"),
    help="Seconds between polls.",
)
@click.option(
    "--timeout",
    type=setting_range(PodResourcesConnectSettings, "timeout"),
    cls=StructDefault,
    show_default=shown(PodResourcesConnectSettings, "timeout"),
    help="Seconds one call may take.",
)
@click.option(
    "--nvml/--no-nvml",
    default=None,
    cls=StructDefault,
    show_default=shown(PodResourcesConnectSettings, "nvml"),
    help="Read NVML's GPU map at start where a driver is, so MIG device ids name their parent "
    "GPU and GPU instance (as XIDs do) and index ids their uuid.",
)
@click.option(
    "--resource",
    "resources",
    metavar="NAME",
    multiple=True,
    help="Extended resource whose devices are GPUs (repeatable; default nvidia.com/gpu and "
    "nvidia.com/gpu.shared).",
)
@click.option(
    "--resource-prefix",
    "prefixes",
    metavar="PREFIX",
    multiple=True,
    help="Resource name prefix of GPU devices (repeatable; default nvidia.com/mig-).",
)
@click.option(
    "--from-json",
    "from_json",
    metavar="FILE",
    type=click.File("r"),
    help="Offline: read a saved List answer (grpcurl's JSON; - for stdin) and print its "
    "bindings as JSON lines, instead of polling and publishing (no Kafka needed).",
)
@brokers_option
@metrics_port_option(PodResourcesConnectSettings)
@click.pass_context
def connect_podresources_command(ctx: click.Context, /, **given: Any) -> int:
    """Poll the kubelet's pod-resources API and publish GPU bindings, until Ctrl-C or SIGTERM.

    The kubelet's own record of which pod holds which GPU: time-sliced replicas
    (<uuid>::<n>) become one shared binding naming every pod, MIG devices bind their
    instance. A kubelet that does not answer is retried with backoff.

    \b
    Examples:
      gputriage connect podresources --cluster prod --node "$NODE_NAME"
      grpcurl -plaintext -unix /var/lib/kubelet/pod-resources/kubelet.sock \\
          v1.PodResourcesLister/List > list.json
      gputriage connect podresources --cluster prod --node n1 --from-json list.json
    """
    _require(ctx, "podresources", given, "node", "cluster")
    saved = given.pop("from_json")
    o: PodResourcesConnectSettings = _merged(ctx, "podresources", given)
    return run_connect_podresources(settings_of(ctx), o, saved.read() if saved else None)


def run_connect_podresources(
    settings: Settings, o: PodResourcesConnectSettings, saved: str | None
) -> int:
    """``connect podresources`` merged: the NVML map (the CLI composes the source families),
    then the offline print or the poller."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from connectors.podresources.client import Filter  # noqa: PLC0415
    from connectors.podresources.run import (  # noqa: PLC0415
        PodResourcesCommand,
        connect_podresources,
        print_saved_list,
    )

    gpu = Filter(resources=o.resources, prefixes=o.prefixes)
    gpus = _nvml_gpu_map() if o.nvml else _empty_gpu_map()
    if saved is not None:
        return print_saved_list(
            saved,
            cluster=_given(o.cluster),
            node=_given(o.node),
            gpus=gpus,
            gpu=gpu,
            time=datetime.now(UTC),
            out=sys.stdout.buffer,
            err=sys.stderr,
        )
    start_logging(settings)
    command = PodResourcesCommand(
        cluster=_given(o.cluster),
        node=_given(o.node),
        socket=o.socket,
        interval_s=o.interval,
        timeout_s=o.timeout,
        gpu=gpu,
        metrics_port=o.metrics_port,
        heartbeat_seconds=o.heartbeat_seconds,
    )
    kwargs = kafka_kwargs(settings, o.brokers)
    return connect_podresources(command, kwargs, topic_layout(settings.topics), gpus, sys.stderr)


def _empty_gpu_map() -> GpuMap:
    from connectors.podresources.devices import GpuMap  # noqa: PLC0415

    return GpuMap()


def _nvml_gpu_map(lib: Any = None) -> GpuMap:
    """NVML's devices as the pod-resources source's :class:`GpuMap` (empty without a driver:
    logged; MIG bindings then carry only their ``MIG-`` uuid, see connectors.podresources)."""
    import logging  # noqa: PLC0415

    from connectors.nvml.devices import Nvml, NvmlUnavailable  # noqa: PLC0415
    from connectors.podresources.devices import GpuInfo, GpuMap  # noqa: PLC0415

    try:
        with Nvml(lib) as nvml:
            devices = nvml.devices()
    except NvmlUnavailable as exc:
        logging.getLogger("gputriage.podresources").info(
            "%s: MIG device ids will not name their parent GPU", exc
        )
        return GpuMap()
    return GpuMap.of(
        GpuInfo(
            uuid=d.parent_uuid or d.uuid,
            pci_bus_id=d.pci_bus_id,
            index=d.index,
            gpu_instance=d.gpu_instance_id if d.parent_uuid else None,
            mig_uuid=d.uuid if d.parent_uuid else "",
            mig_profile=d.mig_profile,
        )
        for d in devices
    )


def connect_defaults(settings: Settings) -> dict[str, dict[str, Any]]:
    """What ``[connect.<source>]`` sets, per source (defaults left out; typos failed at load).

    What :func:`_require` looks in for a required option that was not given (and
    what the deploy tests check the manifests against).
    """
    tables = {
        source: explicit(getattr(settings.connect, source))
        for source in settings.connect.__struct_fields__
    }
    return {source: table for source, table in tables.items() if table}
