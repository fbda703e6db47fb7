"""``gputriage replay``: recorded events in, incidents out, offline (no Kafka).

Options default to ``None`` ("not given"): :class:`gputriage.replay.ReplayOptions`
owns the defaults (:mod:`gputriage.cli.output`), and ``--help`` shows them from there.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from connectors.files import STDIN
from gputriage.cli.common import CONTEXT, open_all, settings_of
from gputriage.cli.output import (
    evidence_option,
    options_of,
    output_option,
    progress_option,
    stats_option,
)
from gputriage.replay import OUTPUTS, ReplayOptions, run_replay

_DEFAULTS = ReplayOptions()


@click.command("replay", context_settings=CONTEXT)
@click.argument(
    "files",
    metavar="FILE...",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
)
@output_option(
    OUTPUTS,
    _DEFAULTS.output,
    "table: one row per incident; wide: more columns; json: every revision as JSON lines.",
)
@evidence_option(
    _DEFAULTS.evidence, "table/wide: list each incident's evidence chain under its row."
)
@click.option(
    "--revisions",
    is_flag=True,
    default=None,
    help="table/wide: show every revision, not only the latest of each incident.",
)
@progress_option
@stats_option
@click.pass_context
def replay_command(ctx: click.Context, /, *, files: tuple[str, ...], **given: Any) -> int:
    """Replay recorded events (JSON lines, plain or gzip; - for stdin) and print incidents.

    Several FILEs are merged in event-time order. A line that does not decode is
    reported as FILE:LINE on stderr and skipped; the exit status is then 1.

    \b
    Examples:
      gputriage replay examples/scenario.jsonl
      gputriage replay -o wide --revisions events-*.jsonl.gz
      gputriage replay -o json examples/scenario.jsonl | jq .type
      kubectl logs deploy/recorder | gputriage replay --stats -
    """
    settings = settings_of(ctx)
    if files.count(STDIN) > 1:
        raise click.BadParameter("stdin (-) can be read only once", param_hint="FILE...")
    options = options_of(ReplayOptions, given)
    return run_replay(
        open_all(files), settings.core_config(), options, sys.stdout.buffer, sys.stderr
    )
