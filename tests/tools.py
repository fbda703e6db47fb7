"""Skipping a test whose external tool (promtool, Alertmanager, kubectl) is missing.

Elsewhere such a test skips, saying why; but a CI machine where ``make tools`` could install
them (apt as root) must not pass on skipped tests, or a broken install would go unnoticed:
``.ci/run`` then sets ``GPUTRIAGE_REQUIRE_TOOLS=1`` and the same skip fails, as
``GPUTRIAGE_REQUIRE_NATIVE=1`` does for the compiled core.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_missing_tool(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it where the tools are required."""
    if os.environ.get("GPUTRIAGE_REQUIRE_TOOLS") == "1":
        pytest.fail(f"GPUTRIAGE_REQUIRE_TOOLS=1 but {reason}")
    pytest.skip(reason)
