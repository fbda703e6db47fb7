"""The ``gputriage`` command line.

Click runs with ``standalone_mode=False`` so that this module, not click, decides
what a failure looks like. The rule: a user mistake (an unknown option, a
missing file, a bad configuration value) is ONE line on stderr,
``gputriage: error: <message>``, and exit status 2 -- never a traceback and
never a screenful of usage. Exit status 1 means the command ran but found a
problem (bad input lines, drifted schema documents); 130 means interrupted.

Trap: click's own ``main`` calls ``sys.exit`` on a broken pipe even in
non-standalone mode, and Python prints an ``Exception ignored`` message if
stdout is closed at exit; :func:`main` handles both so ``gputriage replay ... |
head`` stays quiet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NoReturn, cast

import click

from connectors.files import STDIN
from gputriage.cli.common import (
    CONTEXT,
    INTERRUPTED,
    PROG,
    USAGE_ERROR,
    brokers_option,
    error,
    kafka_kwargs,
    open_all,
    settings_of,
)
from gputriage.cli.connect import connect_defaults, connect_group
from gputriage.cli.ingest import ingest_group
from gputriage.replay import OUTPUTS, Output, ReplayOptions, replay
from gputriage.settings import CONFIG_ENV, SettingsError, load_settings
from gputriage.tail import (
    CONNECT_TIMEOUT_S,
    KafkaUnavailable,
    StartAt,
    TailOptions,
    parse_start,
    run_tail,
)
from schemas.jsonschema import DOCUMENT_DIR, drifted_documents, write_documents
from schemas.topics import topic_layout


@click.group(context_settings=CONTEXT, invoke_without_command=True)
@click.version_option(package_name="gputriage", prog_name=PROG, message="%(prog)s %(version)s")
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"TOML settings file ([core], [xid], [kafka], [topics], [processor], [log], "
    f"[connect.<source>] tables); default ${CONFIG_ENV}. "
    "GPUTRIAGE_<SECTION>__<KEY> environment variables override it.",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> int:
    """Join Kubernetes, XID and autoscaler signals of GPU clusters into incidents."""
    ctx.obj = config_path
    if ctx.invoked_subcommand == "connect":
        # [connect.k8s] cluster = "prod" (or GPUTRIAGE_CONNECT__K8S__CLUSTER=prod) is the
        # default of `connect k8s --cluster`: connectors run in pods, configured by a
        # mounted file or the environment rather than long argument lists.
        ctx.default_map = {"connect": connect_defaults(load_settings(config_path))}
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
    return 0


@cli.command("replay", context_settings=CONTEXT)
@click.argument(
    "files",
    metavar="FILE...",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table: one row per incident; wide: more columns; json: every revision as JSON lines.",
)
@click.option(
    "--evidence/--no-evidence",
    default=True,
    show_default=True,
    help="table/wide: list each incident's evidence chain under its row.",
)
@click.option(
    "--revisions",
    is_flag=True,
    help="table/wide: show every revision, not only the latest of each incident.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr. Default: only when stderr is a terminal and input is large.",
)
@click.option("--stats", is_flag=True, help="Print the core's counters on stderr at the end.")
@click.pass_context
def replay_command(
    ctx: click.Context,
    *,
    files: tuple[str, ...],
    output: str,
    evidence: bool,
    revisions: bool,
    progress: bool | None,
    stats: bool,
) -> int:
    """Replay recorded events (JSON lines, plain or gzip; - for stdin) and print incidents.

    Several FILEs are merged in event-time order. A line that does not decode is
    reported as FILE:LINE on stderr and skipped; the exit status is then 1.
    """
    config = load_settings(ctx.obj).core_config()
    if files.count(STDIN) > 1:
        raise click.BadParameter("stdin (-) can be read only once", param_hint="FILE...")
    options = ReplayOptions(
        output=cast(Output, output),
        evidence=evidence,
        revisions=revisions,
        progress=progress,
        stats=stats,
    )
    sources = open_all(files)
    try:
        result = replay(sources, config, options, sys.stdout.buffer, sys.stderr)
    finally:
        for source in sources:
            source.close()
    return result.exit_code


def _start_at(_ctx: click.Context, _param: click.Parameter, value: str) -> StartAt:
    try:
        return parse_start(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command("tail", context_settings=CONTEXT)
@click.option(
    "--from",
    "start",
    metavar="now|beginning|TIME|OFFSET",
    default="now",
    show_default=True,
    callback=_start_at,
    help="Where to start: the end, the oldest record, an RFC 3339 time "
    "(2026-11-30T10:00:00Z), or an offset in every partition.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table/wide: one row per incident revision; json: each revision as a JSON line.",
)
@click.option(
    "--evidence/--no-evidence",
    default=False,
    show_default=True,
    help="table/wide: list each revision's evidence chain under its row.",
)
@click.option(
    "--brokers",
    metavar="HOST:PORT[,...]",
    default=None,
    help="Kafka bootstrap servers; overrides kafka.brokers from the settings.",
)
@click.option(
    "--connect-timeout",
    "connect_timeout",
    metavar="SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    default=CONNECT_TIMEOUT_S,
    show_default=True,
    help="Give up when the brokers cannot be reached within this long.",
)
@click.pass_context
def tail_command(
    ctx: click.Context,
    *,
    start: StartAt,
    output: str,
    evidence: bool,
    brokers: str | None,
    connect_timeout: float,
) -> int:
    """Follow the incident topic and print each incident revision as it arrives.

    Reads every partition without a consumer group (nothing is committed) until
    Ctrl-C, which ends it with status 0. A record that does not decode is
    reported on stderr with its partition and offset and skipped; the exit
    status is then 1. An unreachable broker or a missing topic is one line on
    stderr and status 1.
    """
    settings = settings_of(ctx)
    topic = settings.topic_settings()
    kwargs = kafka_kwargs(settings, brokers)
    options = TailOptions(
        start=start,
        output=cast(Output, output),
        evidence=evidence,
        connect_timeout_s=connect_timeout,
    )
    try:
        result = run_tail(
            kwargs, topic_layout(topic).incidents.name, options, sys.stdout.buffer, sys.stderr
        )
    except KafkaUnavailable as exc:
        error(str(exc))
        return 1
    return result.exit_code


@cli.command("process", context_settings=CONTEXT)
@brokers_option
@click.option("--app-id", help="Consumer group / app id; workers with the same id share work.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Port of the Prometheus /metrics endpoint (default 9464; 0 picks a free one).",
)
@click.pass_context
def process_command(
    ctx: click.Context, *, brokers: str | None, app_id: str | None, metrics_port: int | None
) -> int:
    """Run a processor worker: raw topics in, incidents out, until Ctrl-C or SIGTERM.

    Creates missing topics first. Several workers with the same app id split the
    partitions between them; each keeps its keys' state in a compacted state topic.
    """
    from gputriage.process import run_worker  # noqa: PLC0415 - aiokafka is slow to import

    settings = settings_of(ctx)
    kafka_kwargs(settings, brokers)  # a configuration mistake is a usage error, before start
    return run_worker(settings, brokers, app_id=app_id, metrics_port=metrics_port)


@cli.command("demo", context_settings=CONTEXT)
@click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Recorded events to play (default: the packaged scenario, as in examples/scenario.jsonl).",
)
@click.option(
    "--speed",
    type=click.FloatRange(min=1.0, max=1000.0),
    default=30.0,
    show_default=True,
    help="Play the scenario this many times faster than real time (windows scale with it).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["lines", "json"]),
    default="lines",
    show_default=True,
    help="lines: one readable line per incident revision; json: JSON lines.",
)
@click.option(
    "--linger",
    type=click.FloatRange(min=0.0),
    default=10.0,
    show_default=True,
    help="After the scenario, stop once no incident arrived for this many seconds.",
)
@click.option("--follow", is_flag=True, help="Keep running after the scenario, until Ctrl-C.")
@click.pass_context
def demo_command(
    ctx: click.Context,
    *,
    scenario: Path | None,
    speed: float,
    output: str,
    linger: float,
    follow: bool,
) -> int:
    """Run the live pipeline on a simulated cluster and print incidents as they are published.

    Starts the embedded Kafka-compatible broker (unless kafka.brokers is set), creates
    the topics, starts a processor worker and plays the scenario into the raw topics.
    Ctrl-C stops everything.
    """
    import asyncio  # noqa: PLC0415

    from gputriage.demo.run import DEFAULT_SCENARIO, DemoOptions, run_demo  # noqa: PLC0415

    settings = load_settings(ctx.obj)
    options = DemoOptions(
        scenario=scenario or DEFAULT_SCENARIO,
        speed=speed,
        output=cast(Literal["lines", "json"], output),
        linger_s=linger,
        follow=follow,
    )
    return asyncio.run(run_demo(settings, options, sys.stdout.buffer, sys.stderr))


@cli.command(context_settings=CONTEXT)
@click.option("--write", "mode", flag_value="write", help="(Re)generate the documents.")
@click.option("--check", "mode", flag_value="check", help="Exit 1 if any document has drifted.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DOCUMENT_DIR,
    show_default="the package's schemas/jsonschema",
    help="Where the documents live.",
)
def schemas(mode: str | None, directory: Path) -> int:
    """Write or check the JSON Schema documents generated from the record types."""
    if mode is None:
        raise click.UsageError("choose --write or --check")
    if mode == "write":
        for name in write_documents(directory):
            click.echo(f"wrote {_shown(directory / name)}")
        return 0
    drifted = drifted_documents(directory)
    for name in drifted:
        click.echo(f"{_shown(directory / name)}: out of date", err=True)
    if drifted:
        click.echo(f"{PROG}: run '{PROG} schemas --write' to regenerate", err=True)
        return 1
    return 0


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


cli.add_command(ingest_group)
cli.add_command(connect_group)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the exit status instead of exiting (tests and embedding)."""
    try:
        result = cli.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        error(exc.format_message().rstrip(".") + hint)
        return USAGE_ERROR
    except click.ClickException as exc:
        error(exc.format_message())
        return USAGE_ERROR
    except SettingsError as exc:
        error(str(exc))
        return USAGE_ERROR
    except click.Abort:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console-script entry point: run, flush, exit."""
    try:
        code = run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): silence the flush Python retries at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 1
    sys.exit(code)
