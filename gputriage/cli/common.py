"""What every ``gputriage`` command shares: names, the error line, files, settings.

The commands live in three modules: :mod:`gputriage.cli` (the root group,
``replay``, ``tail``, ``process``, ``demo``, ``schemas``, and the error policy
in :func:`gputriage.cli.run`), :mod:`gputriage.cli.ingest` (offline readers of
recorded source data) and :mod:`gputriage.cli.connect` (the live connectors).
Heavy imports (aiokafka, kubernetes-asyncio, aiohttp, pynvml) stay inside the
command functions, so ``gputriage --help`` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from connectors.files import FileSource
from connectors.kafka.config import KafkaConfigError, client_kwargs
from gputriage.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from connectors.k8s.slim import SlimConfig

F = TypeVar("F", bound=Callable[..., Any])

PROG: Final = "gputriage"
USAGE_ERROR: Final = 2
INTERRUPTED: Final = 130
CONTEXT: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def error(message: str) -> None:
    """The one-line error: ``gputriage: error: <message>`` on stderr."""
    text = " ".join(message.split())
    print(f"{PROG}: error: {text}", file=sys.stderr)


def open_all(paths: Sequence[str]) -> list[FileSource]:
    """Open every path (``-`` is stdin), or none: a missing file is a usage error."""
    sources: list[FileSource] = []
    try:
        for path in paths:
            sources.append(FileSource(path))
    except OSError as exc:
        for source in sources:
            source.close()
        raise click.FileError(exc.filename or "?", hint=exc.strerror or str(exc)) from None
    return sources


def settings_of(ctx: click.Context) -> Settings:
    """The settings of this invocation (``--config`` / ``$GPUTRIAGE_CONFIG`` + environment)."""
    return load_settings(ctx.find_root().obj)


def kafka_kwargs(settings: Settings, brokers: str | None) -> dict[str, Any]:
    """aiokafka client arguments from ``[kafka]``, ``--brokers`` winning."""
    try:
        return dict(client_kwargs(settings.kafka_settings(), brokers))
    except KafkaConfigError as exc:
        raise click.UsageError(f"{exc}, or pass --brokers") from None


def start_logging(settings: Settings) -> None:
    """Configure logging from ``[log]`` (long-running commands only)."""
    from gputriage.logs import LogConfigError, configure_logging  # noqa: PLC0415

    try:
        configure_logging(settings.section("log"))
    except LogConfigError as exc:
        raise SettingsError(f"invalid configuration: {exc}") from None


def boot_time_option(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> datetime | None:
    """``--boot-time``: RFC 3339 with an offset, or seconds since the epoch (``btime``)."""
    if value is None:
        return None
    try:
        if value.isdigit():
            return datetime.fromtimestamp(int(value), UTC)
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        raise click.BadParameter(f"{value!r} is not an RFC 3339 time or epoch seconds") from None
    if stamp.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no UTC offset (add Z or +hh:mm)")
    return stamp


def _time_zone(_ctx: click.Context, _param: click.Parameter, value: str) -> tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415

    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"unknown time zone {value!r}") from None


tz_option = click.option(
    "--tz",
    metavar="ZONE",
    default="UTC",
    show_default=True,
    callback=_time_zone,
    help="Time zone of dmesg -T and syslog times (the node's local zone).",
)
year_option = click.option(
    "--year",
    type=click.IntRange(1970, 9999),
    default=None,
    help="Year of syslog times, which have none (default: this year).",
)


def http_url_option(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """An ``http://`` or ``https://`` URL with something after the scheme."""
    if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
        raise click.BadParameter(f"{value!r} is not an http(s):// URL")
    return value


# -- options several commands share (one definition, one help text) -------------------
brokers_option = click.option(
    "--brokers",
    metavar="HOST:PORT[,...]",
    help="Kafka bootstrap servers (default: kafka.brokers from the settings).",
)
node_option = click.option(
    "--node", required=True, envvar="NODE_NAME", help="This node's name ($NODE_NAME)."
)
cluster_option = click.option(
    "--cluster", required=True, help="Cluster name to put on every event."
)


def metrics_port_option(default: int) -> Callable[[F], F]:
    """``--metrics-port`` with a per-command default (each process its own port)."""
    return click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=default,
        show_default=True,
        help="Port of the Prometheus /metrics endpoint (0 picks a free one).",
    )


def slim_config(resources: tuple[str, ...], prefixes: tuple[str, ...]) -> SlimConfig:
    """What ``--resource``/``--resource-prefix`` say counts as a GPU (defaults if not given)."""
    from connectors.k8s.slim import DEFAULT_CONFIG, SlimConfig  # noqa: PLC0415

    return SlimConfig(
        gpu_resources=resources or DEFAULT_CONFIG.gpu_resources,
        gpu_prefixes=prefixes or DEFAULT_CONFIG.gpu_prefixes,
    )


def gpu_resource_options(command: F) -> F:
    """``--all``, ``--resource``, ``--resource-prefix``: what counts as a GPU pod or node."""
    for option in reversed(
        (
            click.option(
                "--all",
                "keep_all",
                is_flag=True,
                help="Keep every pod, node and Event, not only GPU ones and the Events "
                "involving them.",
            ),
            click.option(
                "--resource",
                "resources",
                metavar="NAME",
                multiple=True,
                help="Extended resource counted as a GPU (repeatable; default nvidia.com/gpu).",
            ),
            click.option(
                "--resource-prefix",
                "prefixes",
                metavar="PREFIX",
                multiple=True,
                help="Resource name prefix counted as a GPU (repeatable; default nvidia.com/mig-).",
            ),
        )
    ):
        command = option(command)
    return command
