"""The pure correlation core: ``(state, event) -> (state, incidents)``.

No I/O, no clock, no randomness (an import-linter contract and a test hold this
line). Time arrives as data: event times and explicit ticks.
"""

from streams.core.config import CoreSettings, XidRule
from streams.core.engine import CoreStats, Correlator, advance, step

__all__ = [
    "CoreSettings",
    "CoreStats",
    "Correlator",
    "XidRule",
    "advance",
    "step",
]
