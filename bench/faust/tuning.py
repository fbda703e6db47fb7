"""The faust tuning the investigation found, now shipped in :mod:`streams.app.faust_tuning`.

The benchmark workers import the production patches from there, so what
``bench/faust`` measures is exactly what ``gputriage process`` runs (see
FINDINGS.md for what each patch buys and why it is safe).
"""

from __future__ import annotations

from streams.app.faust_tuning import NoopMonitor, install_batch_drain, install_fetch_max_wait

__all__ = ["NoopMonitor", "install_batch_drain", "install_fetch_max_wait"]
