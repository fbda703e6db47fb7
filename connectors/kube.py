"""The Kubernetes API client every family that reads the API shares (k8s, autoscaler).

Families never import each other, so the client lives here, beside them: one way to
load a kubeconfig or the pod's service account, and one error for a setup problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kubernetes_asyncio.client import ApiClient, Configuration

SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeConfigError(RuntimeError):
    """A Kubernetes setup problem worth one line (no kubeconfig, no service account).

    No broker is not one: that is the :class:`~connectors.kafka.config.KafkaUnreachable`
    every connector raises, reported by the CLI.
    """


async def kube_client(
    *, in_cluster: bool, kubeconfig: str | None = None, context: str | None = None
) -> ApiClient:
    """An ApiClient from the in-cluster service account or a kubeconfig (+ context)."""
    from kubernetes_asyncio.config import (  # noqa: PLC0415 - config loading is rarely needed
        ConfigException,
        load_incluster_config,
        load_kube_config,
    )

    configuration = Configuration()
    try:
        if in_cluster:
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        where = "in-cluster service account" if in_cluster else "kubeconfig"
        raise KubeConfigError(f"cannot load the {where}: {exc}") from None
    return ApiClient(configuration)


def service_account_namespace() -> str | None:
    """The namespace the pod runs in (in-cluster only; None elsewhere)."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None
