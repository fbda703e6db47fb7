"""The ``gputriage`` command line: the root group and the error policy; one module per verb.

Click runs with ``standalone_mode=False`` so that this module decides what a failure looks
like: a user mistake is ONE line on stderr, ``gputriage: error: <message>``
(:func:`gputriage.errors.error`), and status 2, never a traceback or a screen of usage;
status 1 means the command ran but found a problem; 130 means interrupted. Each verb's
module builds one options value and calls one ``run_*`` that returns the status.

Trap: click's ``main`` calls ``sys.exit`` on a broken pipe even in non-standalone mode,
and Python prints ``Exception ignored`` if stdout is closed at exit: :func:`main` handles
both (``gputriage replay ... | head`` stays quiet); a failed write (``> /dev/full``) is one
line, ``write error: No space left on device``, and status 1.
docs/development.md, design notes: the command line's error policy.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from connectors.kafka.config import KafkaUnreachable
from connectors.prometheus import MetricsUnavailable
from connectors.state import StateError
from gputriage.cli.bridge import bridge_command
from gputriage.cli.common import CONTEXT
from gputriage.cli.connect import connect_group
from gputriage.cli.demo import demo_command
from gputriage.cli.ingest import ingest_group
from gputriage.cli.process import process_command
from gputriage.cli.replay import replay_command
from gputriage.cli.schemas import schemas_command
from gputriage.cli.score import score_command
from gputriage.cli.simulate import simulate_command
from gputriage.cli.status import status_command
from gputriage.cli.tail import tail_command
from gputriage.cli.writeback import writeback_command
from gputriage.errors import FAILED, INTERRUPTED, PROG, USAGE_ERROR, error, os_error_text
from gputriage.settings import CONFIG_ENV, SettingsError


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
    """Join Kubernetes, XID and autoscaler signals of GPU clusters into incidents.

    \b
    Examples:
      gputriage replay examples/scenario.jsonl
      gputriage demo
      gputriage --config /etc/gputriage.toml process
      gputriage tail --from beginning -o wide
      gputriage connect kmsg --cluster prod --node "$NODE_NAME"
    """
    ctx.obj = config_path
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
    return 0


for _command in (
    replay_command,
    tail_command,
    status_command,
    process_command,
    demo_command,
    schemas_command,
    ingest_group,
    connect_group,
    bridge_command,
    writeback_command,
    simulate_command,
    score_command,
):
    cli.add_command(_command)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the exit status instead of exiting (tests and embedding)."""
    try:
        result = cli.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.UsageError as exc:
        error(_with_help(exc.format_message().rstrip("."), exc.ctx))
        return USAGE_ERROR
    except click.ClickException as exc:
        error(exc.format_message())
        return USAGE_ERROR
    except SettingsError as exc:
        error(str(exc))
        return USAGE_ERROR
    except (KafkaUnreachable, MetricsUnavailable, StateError) as exc:  # any connector's
        error(str(exc))
        return FAILED
    except click.Abort:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise  # the reader went away: main() ends quietly, as Unix tools do
        error(os_error_text(exc))
        return FAILED
    return result if isinstance(result, int) else 0


def _with_help(message: str, ctx: click.Context | None) -> str:
    """``message (see 'CMD --help')``; into a closing parenthetical, one: ``(...; see ...)``."""
    if ctx is None:
        return message
    see = f"see '{ctx.command_path} --help'"
    return f"{message[:-1]}; {see})" if message.endswith(")") else f"{message} ({see})"


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console-script entry point: run, flush, exit."""
    try:
        code = run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): silence the flush Python retries at exit.
        _discard_stdout()
        code = FAILED
    except OSError as exc:  # the last of the output did not fit (/dev/full): say so, once
        _discard_stdout()
        error(os_error_text(exc))
        code = FAILED
    sys.exit(code)


def _discard_stdout() -> None:
    """Point stdout at ``/dev/null``, so the flush Python retries at exit fails no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
