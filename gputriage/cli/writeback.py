"""``gputriage writeback``: incidents back into Kubernetes (Events; node marks when asked).

Options are generated from :class:`connectors.writeback.settings.WritebackSettings`
(``[writeback]`` in the settings file). The cluster defaults to ``[connect.k8s] cluster``:
pod and node names repeat across clusters that share an incident topic, so marking nodes
with no cluster is refused. Kubernetes and Kafka problems are one line and
status 1; a settings mistake is status 2 (:mod:`gputriage.cli`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from typing import Any

import click
import msgspec

from connectors.writeback.settings import WritebackSettings
from gputriage.cli.common import CONTEXT, kafka_kwargs, settings_of, start_logging
from gputriage.cli.options import brokers_option, lay_over, settings_options
from gputriage.errors import error
from schemas.topics import topic_layout

log = logging.getLogger("gputriage.writeback")


def default_identity() -> str:
    """The pod's name (``$POD_NAME`` from the downward API, else ``$HOSTNAME``)."""
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()


@click.command("writeback", context_settings=CONTEXT)
@brokers_option
@settings_options(WritebackSettings)
@click.pass_context
def writeback_command(ctx: click.Context, /, *, brokers: str | None, **given: Any) -> int:
    """Write incidents back into Kubernetes until Ctrl-C or SIGTERM.

    Each pod hit by a GPU fault gets one Event (the GPUXidError format Flyte reads),
    bumped, not repeated, deleted on resolve; node-level incidents one on the node.
    --mark-nodes sets a node condition (server-side apply, never forced, bounded by a
    breaker) while a page-level hardware incident is open. Each start reads the
    incident topic to its end and converges (see docs/writeback.md).

    \b
    Examples:
      gputriage writeback --in-cluster --leader-election
      gputriage writeback --dry-run --mark-nodes --context staging --cluster staging
      gputriage writeback --mark-nodes --cluster prod --condition-type AcceleratedHardwareReady \\
          --max-marked-nodes 3 --max-pool-fraction 0.1
    """
    from connectors.kube import KubeConfigError, service_account_namespace  # noqa: PLC0415

    settings = settings_of(ctx)
    options = lay_over(settings.writeback, given, where="writeback")
    # one cluster's names only: pod and node names repeat across clusters sharing a topic
    cluster = options.cluster or settings.connect.k8s.cluster or ""
    if options.mark_nodes and not cluster:
        raise click.UsageError(
            "--mark-nodes needs --cluster (the cluster whose nodes it marks; default: "
            "[connect.k8s] cluster)"
        )
    options = msgspec.structs.replace(options, cluster=cluster)
    identity = options.identity or default_identity()
    lease = None
    if options.leader_election:
        from connectors.k8s.leader import LeaseOptions  # noqa: PLC0415

        namespace = options.lease_namespace or service_account_namespace()
        if not namespace:
            raise click.UsageError("--leader-election needs --lease-namespace outside a pod")
        lease = LeaseOptions(namespace=namespace, name=options.lease_name, identity=identity)
    kwargs = kafka_kwargs(settings, brokers)
    topic = topic_layout(settings.topics).incidents.name
    start_logging(settings)
    from connectors.writeback.runner import serve  # noqa: PLC0415 - kubernetes, aiokafka

    try:
        return asyncio.run(
            serve(options, kwargs, topic, identity=identity, lease=lease, out=sys.stdout)
        )
    except KubeConfigError as exc:
        error(str(exc))
        return 1
