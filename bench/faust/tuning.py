"""The faust tuning, kept where the issue-3 bench imports it from.

The patches live in :mod:`streams.app.faust_tuning` now: the ``--engine faust``
processor installs them too, and production code does not import ``bench``.
"""

from __future__ import annotations

from streams.app.faust_tuning import (
    FAUST_VERSION,
    NoopMonitor,
    faust_version_ok,
    install,
    install_batch_drain,
    install_fetch_max_wait,
    quiet_spinner,
)

__all__ = [
    "FAUST_VERSION",
    "NoopMonitor",
    "faust_version_ok",
    "install",
    "install_batch_drain",
    "install_fetch_max_wait",
    "quiet_spinner",
]
