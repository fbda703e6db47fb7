"""What ``gputriage demo`` can be told: one struct, the options generated from it.

Apart from :mod:`gputriage.demo.run` (which imports aiokafka), so ``gputriage demo
--help`` shows the defaults without loading the Kafka client. Not a table of the
settings file: the demo is a command-line affair.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

DEFAULT_SCENARIO: Final = Path(__file__).with_name("scenario.jsonl")
"""The recorded scenario, package data (``examples/scenario.jsonl`` links to it)."""


class DemoSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The demo's knobs; every one is an option of ``gputriage demo``."""

    scenario: Annotated[
        Path | None,
        msgspec.Meta(
            description="Recorded events to play (default: the packaged scenario, as in "
            "examples/scenario.jsonl).",
            extra={"path": {"exists": True, "dir_okay": False, "path_type": Path}},
        ),
    ] = None
    speed: Annotated[
        float,
        msgspec.Meta(
            ge=1.0,
            le=1000.0,
            description="Play the scenario this many times faster than real time (windows "
            "scale with it).",
        ),
    ] = 30.0
    output: Annotated[
        Literal["lines", "json"],
        msgspec.Meta(
            description="lines: one readable line per incident revision; json: JSON lines.",
            extra={"short": "-o"},
        ),
    ] = "lines"
    linger_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0.0,
            le=86400.0,
            description="After the scenario, stop once no incident arrived for this long.",
        ),
    ] = 10.0
    follow: Annotated[
        bool, msgspec.Meta(description="Keep running after the scenario, until Ctrl-C.")
    ] = False
    metrics_port: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=65535,
            description="Port of the demo worker's /metrics endpoint (0 picks a free one).",
        ),
    ] = 0

    @property
    def scenario_path(self) -> Path:
        """The scenario to play: the one given, or the packaged one."""
        return self.scenario or DEFAULT_SCENARIO
