"""Event time as float seconds and back: :mod:`schemas.timeconv`, where it is declared.

It moved down to the schemas because the router (:mod:`schemas.keys`, which may not
import ``streams``) converts the same event times; the core's modules import it from
here, and compiled with it in one group they call it natively.
"""

from __future__ import annotations

from schemas.timeconv import to_datetime, to_seconds

__all__ = ["to_datetime", "to_seconds"]
