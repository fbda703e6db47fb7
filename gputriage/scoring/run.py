"""``gputriage score``'s run: read the truth, replay the events, match, report, judge.

Exit status: 0 when every line of the events decoded and every figure is at or above
its bar; 1 when the score ran but some event line was bad (reported ``FILE:LINE``,
counted, skipped, as ``gputriage replay`` does) or a figure is below its bar (one line
on stderr naming each); a bad truth file raises :class:`~gputriage.scoring.truth_file.
TruthError` before anything is replayed (the CLI's one-line usage error, exit 2).

Stdout carries only the score (the table, or one JSON object); everything else goes
to stderr, so ``score -o json ... | jq`` is clean.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Final, Literal, TextIO

from connectors.files import FileReader
from gputriage.replay import ReplayResult, correlate, write_summary
from gputriage.scoring.matching import detections, match
from gputriage.scoring.metrics import confusion, shortfalls, type_scores
from gputriage.scoring.pools import pool_scores, slice_nodes, subjects
from gputriage.scoring.report import Score, table, to_json
from gputriage.scoring.truth_file import read_truth
from schemas.truth import ExpectedIncident
from streams.core.config import CoreSettings

ScoreOutput = Literal["table", "json"]
SCORE_OUTPUTS: Final[tuple[ScoreOutput, ...]] = ("table", "json")


@dataclass(frozen=True)
class ScoreOptions:
    """How to report and what to require; every field has the CLI's default."""

    output: ScoreOutput = "table"
    min_precision: float | None = None
    """Exit 1 when a type's precision is below this (None: no bar)."""
    min_recall: float | None = None
    """Exit 1 when a type's recall is below this (None: no bar)."""
    stats: bool = False
    """Print the core's counters on stderr at the end of the replay."""
    progress: bool | None = None
    """As ``gputriage replay --progress``."""


def score_replay(
    truths: list[ExpectedIncident],
    result: ReplayResult,
    dra_nodes: Iterable[tuple[str, str]] = (),
) -> Score:
    """The score of a replay's incidents against ``truths`` (pure); ``dra_nodes``: the
    (cluster, node) pairs the events show as DRA nodes, besides those the truths name."""
    matching = match(truths, detections(result.revisions, result.first_published))
    dra = subjects(truths, dra_nodes)
    pools = pool_scores(matching, dra) if dra else {}
    return Score(type_scores(matching), confusion(matching), matching, pools)


def run_score(
    events: FileReader,
    truth_path: str,
    config: CoreSettings,
    options: ScoreOptions,
    stdout: BinaryIO,
    stderr: TextIO,
) -> int:
    """Score and report (the module docstring's contract); closes ``events``."""
    try:
        truths = read_truth(truth_path)  # first: a bad truth must not cost a replay
        dra_nodes = slice_nodes(events.name)
        result = correlate([events], config, stderr, progress=options.progress)
    finally:
        events.close()
    report = score_replay(truths, result, dra_nodes)
    if options.output == "json":
        stdout.write(to_json(report))
    else:
        text = table(report)
        if text:
            stdout.write(text.encode("utf-8"))
        else:
            print("gputriage: no incidents and no truths: nothing to score", file=stderr)
    stdout.flush()
    write_summary(result, stderr, stats=options.stats)
    below = shortfalls(
        report.types, min_precision=options.min_precision, min_recall=options.min_recall
    )
    if below:
        print(f"gputriage: below the bar: {'; '.join(below)}", file=stderr)
    return 1 if below or result.bad_lines else 0
