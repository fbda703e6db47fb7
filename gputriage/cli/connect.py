"""``gputriage connect``: the live source connectors, each publishing typed events to Kafka.

Each verb's options are generated from its family's settings struct
(``connectors/<family>/settings.py``), which is also its ``[connect.<source>]`` table;
the options given are laid over that table (the command line wins) and the connector
takes the struct itself. Every connector runs until SIGINT/SIGTERM, serves metrics on
its own port and sends what it cannot read to the dead-letter topic. Trap: Kafka
unreachable at start is a ``KafkaUnreachable`` that :func:`gputriage.cli.run` reports.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from connectors.autoscaler.settings import AutoscalerSettings
from connectors.dcgm.settings import DcgmSettings
from connectors.k8s.settings import K8sSettings
from connectors.nvml.settings import NvmlSettings
from connectors.podresources.settings import PodResourcesSettings
from connectors.state import StateInUse
from connectors.topology.settings import TopoSettings
from connectors.xid.settings import KmsgSettings
from gputriage.cli.common import CONTEXT, http_url, kafka_kwargs, settings_of, start_logging
from gputriage.cli.compose import nvml_gpu_map, open_nvml
from gputriage.cli.options import lay_over, settings_options
from gputriage.errors import error
from schemas.topics import topic_layout

if TYPE_CHECKING:
    from connectors.kafka.producer import KafkaTarget


def _table(ctx: click.Context, source: str, given: dict[str, Any]) -> Any:
    """``[connect.<source>]`` with the options that were given laid over it."""
    table = getattr(settings_of(ctx).connect, source)
    return lay_over(table, given, where=f"connect.{source}")


def _kafka(ctx: click.Context, brokers: str | None) -> Callable[[], KafkaTarget]:
    """Logging started per ``[log]``; where to publish, read when called (nvml and topo call
    it only once their source is known to work: on a node without one, that is the news)."""
    from connectors.kafka.producer import KafkaTarget  # noqa: PLC0415

    settings = settings_of(ctx)
    start_logging(settings)
    return lambda: KafkaTarget(kafka_kwargs(settings, brokers), topic_layout(settings.topics))


def _run(main: Callable[[], int], *reported: type[Exception]) -> int:
    """``main()``; one of ``reported`` is one line and exit 1."""
    try:
        return main()
    except reported as exc:
        error(str(exc))
        return 1


@click.group("connect", context_settings=CONTEXT)
def connect_group() -> None:
    """Run a live source connector: read a source, publish typed events to the raw topics.

    \b
    Examples:
      gputriage connect k8s --cluster prod --in-cluster
      gputriage connect kmsg --cluster prod --node "$NODE_NAME"
      gputriage connect dcgm --cluster prod --node n1 --url http://10.0.0.5:9400/metrics
      gputriage connect nvml --cluster prod --node n1 --print-only --once
      gputriage connect podresources --cluster prod --node "$NODE_NAME"
      gputriage connect topo --cluster prod --node n1 --print-only --once
      gputriage connect autoscaler --cluster prod --in-cluster
    """


@connect_group.command("k8s", context_settings=CONTEXT)
@settings_options(K8sSettings)
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
    from connectors import kube  # noqa: PLC0415
    from connectors.autoscaler.kube_events import derive  # noqa: PLC0415
    from connectors.k8s import run  # noqa: PLC0415
    from connectors.k8s.leader import LeaseOptions  # noqa: PLC0415

    o: K8sSettings = _table(ctx, "k8s", given)
    lease = None
    if o.leader_election:
        lease_ns = o.lease_namespace or kube.service_account_namespace()
        if not lease_ns:
            raise click.UsageError("--leader-election needs --lease-namespace outside a pod")
        identity = o.identity or run.default_identity()
        lease = LeaseOptions(namespace=lease_ns, name=o.lease_name, identity=identity)
    kwargs, layout = _kafka(ctx, o.brokers)()
    # Autoscaler Events also become autoscaler.v1 records, GPU-related or not.
    main = run.run_connect(o, kwargs, layout, lease=lease, derive=derive)
    return _run(lambda: asyncio.run(main), kube.KubeConfigError)


@connect_group.command("kmsg", context_settings=CONTEXT)
@settings_options(KmsgSettings)
@click.pass_context
def connect_kmsg_command(ctx: click.Context, /, **given: Any) -> int:
    """Read /dev/kmsg and publish XID/SXid events to the xids topic, until Ctrl-C or SIGTERM.

    Resumes after the last record handled (the state file), reports a reboot
    (new boot id) as a Rebooted event, and sends unreadable XID lines to the
    dead-letter topic. Run one per GPU node (a DaemonSet). With --journal it
    follows journalctl's kernel entries instead, resuming at the saved cursor;
    with --log-file a kernel log file, resuming at the saved inode and offset.

    \b
    Examples:
      gputriage connect kmsg --cluster prod --node "$NODE_NAME"
      gputriage connect kmsg --cluster prod --node n1 --journal
      gputriage connect kmsg --cluster prod --node n1 --log-file /var/log/kern.log --tz Europe/Paris
      gputriage connect kmsg --cluster prod --node n1 --once --no-nvml
    """
    from aiokafka.errors import KafkaError  # noqa: PLC0415

    from connectors.nvml.devices import enricher  # noqa: PLC0415
    from connectors.xid.run import run_kmsg  # noqa: PLC0415

    o: KmsgSettings = _table(ctx, "kmsg", given)
    if o.journal and o.log_file:
        raise click.UsageError("--journal and --log-file are two different sources: choose one")
    kwargs, layout = _kafka(ctx, o.brokers)()
    try:
        # The xid family knows nothing of NVML: the GPU map is joined in here.
        enrich = enricher() if o.nvml else None
        return asyncio.run(run_kmsg(o, kwargs, layout, sys.stderr, enrich=enrich))
    except KafkaError as exc:  # failed mid-run, past the producer's retries
        error(f"Kafka: {exc!r}")
        return 1
    except OSError as exc:
        if exc.filename is None:
            raise  # not a file of the settings: the CLI's one line for it (exit 1)
        raise click.FileError(exc.filename, hint=exc.strerror or str(exc)) from None
    except (ValueError, StateInUse) as exc:  # an unreadable btime or boot id; a 2nd reader
        error(str(exc))
        return 1


@connect_group.command("dcgm", context_settings=CONTEXT)
@settings_options(DcgmSettings)
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
          --state-path /var/lib/gputriage/dcgm.json
    """
    from connectors.dcgm.run import connect_dcgm  # noqa: PLC0415

    o: DcgmSettings = _table(ctx, "dcgm", given)
    http_url(o.url or "")
    target = _kafka(ctx, o.brokers)()
    return _run(lambda: connect_dcgm(o, target, sys.stderr), StateInUse)


@connect_group.command("nvml", context_settings=CONTEXT)
@settings_options(NvmlSettings)
@click.pass_context
def connect_nvml_command(ctx: click.Context, /, **given: Any) -> int:
    """Publish the GPU map and NVML XID critical-error events, until Ctrl-C or SIGTERM.

    Needs the NVIDIA driver: without one it says so in one line and exits 1.

    \b
    Examples:
      gputriage connect nvml --cluster prod --node "$NODE_NAME"
      gputriage connect nvml --cluster dev --node n1 --print-only --once
    """
    from connectors.nvml.run import connect_nvml  # noqa: PLC0415

    o: NvmlSettings = _table(ctx, "nvml", given)
    return connect_nvml(o, _kafka(ctx, o.brokers), sys.stdout.buffer, sys.stderr)


@connect_group.command("topo", context_settings=CONTEXT)
@settings_options(TopoSettings)
@click.pass_context
def connect_topo_command(ctx: click.Context, /, **given: Any) -> int:
    """Publish the node's GPU topology (gpu_topology.v1) at start and on change.

    GPU pair links (NV<n>, PIX, PXB, PHB, NODE, SYS) and each GPU's NUMA node and CPU
    affinity, from NVML where a driver is, else from nvidia-smi topo -m (-mp if that
    fails). Read every --interval-seconds; published only when it changed. A failed
    read is a dead letter and the next poll goes on. Neither NVML nor nvidia-smi: one
    line, exit 1.

    \b
    Examples:
      gputriage connect topo --cluster prod --node "$NODE_NAME"
      gputriage connect topo --cluster dev --node n1 --print-only --once
      gputriage connect topo --cluster dev --node n1 --no-nvml --nvidia-smi /usr/bin/nvidia-smi
    """
    from connectors.topology.live import connect_topo  # noqa: PLC0415

    o: TopoSettings = _table(ctx, "topo", given)
    target = _kafka(ctx, o.brokers)
    return connect_topo(o, target, sys.stdout.buffer, sys.stderr, open_nvml=open_nvml)


@connect_group.command("autoscaler", context_settings=CONTEXT)
@settings_options(AutoscalerSettings)
@click.pass_context
def connect_autoscaler_command(ctx: click.Context, /, **given: Any) -> int:
    """Follow the cluster-autoscaler's (or Karpenter's) pod logs and publish autoscaler.v1
    records, until Ctrl-C or SIGTERM.

    Follows the cluster-autoscaler-status ConfigMap and every running pod the selector matches
    (only the leader logs decisions); reconnects resume after the last line, a restarted
    container's old tail first. Lines stating no fact are counted, unreadable ones dead-lettered.
    Needs get/list on pods, get on pods/log, get/list/watch on configmaps there.

    \b
    Examples:
      gputriage connect autoscaler --cluster prod --in-cluster \\
          --state-path /var/lib/gputriage/ca.json
      gputriage connect autoscaler --cluster dev --context kind-dev --format karpenter \\
          --namespace karpenter
    """
    from connectors.autoscaler.run import run_connect_autoscaler  # noqa: PLC0415
    from connectors.kube import KubeConfigError, kube_client  # noqa: PLC0415

    o: AutoscalerSettings = _table(ctx, "autoscaler", given)
    kwargs, layout = _kafka(ctx, o.brokers)()

    async def main() -> int:
        api = await kube_client(in_cluster=o.in_cluster, kubeconfig=o.kubeconfig, context=o.context)
        return await run_connect_autoscaler(o, api, kwargs, layout)

    return _run(lambda: asyncio.run(main()), KubeConfigError, StateInUse)


@connect_group.command("podresources", context_settings=CONTEXT)
@settings_options(PodResourcesSettings)
@click.option(
    "--from-json",
    "from_json",
    metavar="FILE",
    type=click.File("r"),
    help="Offline: read a saved List answer (grpcurl's JSON; - for stdin) and print its "
    "bindings as JSON lines, instead of polling and publishing (no Kafka needed).",
)
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
    from datetime import UTC, datetime  # noqa: PLC0415

    from connectors.podresources.devices import GpuMap  # noqa: PLC0415
    from connectors.podresources.run import connect_podresources, print_saved_list  # noqa: PLC0415

    saved = given.pop("from_json")
    o: PodResourcesSettings = _table(ctx, "podresources", given)
    gpus = nvml_gpu_map() if o.nvml else GpuMap()
    if saved is not None:
        now, out = datetime.now(UTC), sys.stdout.buffer
        return print_saved_list(saved.read(), o, gpus=gpus, time=now, out=out, err=sys.stderr)
    return connect_podresources(o, _kafka(ctx, o.brokers)(), gpus, sys.stderr)
