"""``gputriage score``: replay EVENTS and score its incidents against a TRUTH file.

Options default to ``None`` ("not given"): :class:`gputriage.scoring.run.ScoreOptions`
owns the defaults. The core's settings come from ``--config`` as for ``replay``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from gputriage.cli.common import CONTEXT, FiniteRange, open_all, settings_of
from gputriage.cli.output import options_of, output_option, progress_option, stats_option
from gputriage.scoring.run import SCORE_OUTPUTS, ScoreOptions, run_score
from gputriage.scoring.truth_file import TruthError

_DEFAULTS = ScoreOptions()
_FRACTION = FiniteRange(min=0.0, max=1.0)


@click.command("score", context_settings=CONTEXT)
@click.argument(
    "events", metavar="EVENTS", type=click.Path(exists=True, dir_okay=False, allow_dash=True)
)
@click.argument("truth", metavar="TRUTH", type=click.Path(exists=True, dir_okay=False))
@output_option(
    SCORE_OUTPUTS,
    _DEFAULTS.output,
    "table: per-type scores, confusion, misses; json: one object (see docs/replay.md).",
)
@click.option(
    "--min-precision",
    type=_FRACTION,
    metavar="P",
    help="Exit 1 if any type's precision is below P.",
)
@click.option(
    "--min-recall",
    type=_FRACTION,
    metavar="R",
    help="Exit 1 if any type's recall is below R.",
)
@progress_option
@stats_option
@click.pass_context
def score_command(ctx: click.Context, /, *, events: str, truth: str, **given: Any) -> int:
    """Replay EVENTS (JSON lines, plain or gzip; - for stdin) and score the incidents
    against TRUTH (truth.v1 lines, as gputriage simulate writes them).

    Prints precision, recall and detection delay (p50/p95) per incident type, which
    truths were reported as another type (confusion), and the misses and false
    positives. A bad EVENTS line is reported as FILE:LINE and skipped (exit 1); a bad
    TRUTH line stops the score (exit 2). A type below the bar of --min-precision or
    --min-recall makes the exit status 1.

    \b
    Examples:
      gputriage score events.jsonl truth.jsonl
      gputriage score -o json events.jsonl truth.jsonl | jq .types
      gputriage score --min-precision 0.9 --min-recall 0.9 events.jsonl truth.jsonl
    """
    settings = settings_of(ctx)
    options = options_of(ScoreOptions, given)
    (source,) = open_all([events])
    try:
        return run_score(
            source, truth, settings.core_config(), options, sys.stdout.buffer, sys.stderr
        )
    except TruthError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.FileError(exc.filename or truth, hint=exc.strerror or str(exc)) from None
