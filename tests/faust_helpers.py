"""Running ``gputriage process --engine faust`` workers against the test broker.

The same subprocess as :class:`tests.processor_helpers.Worker` (its log, ``kill``,
``stop``), started with ``--engine faust``: the default engine's helpers read its
log and the group's offsets unchanged.
"""

from __future__ import annotations

from pathlib import Path

from tests.kafka_helpers import KafkaTestEnv
from tests.processor_helpers import Worker

QUICK_GROUP = {
    "GPUTRIAGE_PROCESSOR__SESSION_TIMEOUT_SECONDS": "2",
    "GPUTRIAGE_PROCESSOR__REBALANCE_TIMEOUT_SECONDS": "2",
}
"""Tansu completes a join after half the session timeout, and a killed member's
partitions are free after the whole of it (bench/faust/FINDINGS.md §5): 2 s keeps a
start under ~1 s and a takeover after SIGKILL under ~3 s."""


class FaustWorker(Worker):
    """One ``python -m gputriage process --engine faust`` subprocess."""

    def __init__(
        self,
        kafka: KafkaTestEnv,
        app_id: str,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        env = {**QUICK_GROUP, **(extra_env or {})}
        super().__init__(kafka, app_id, log_path, env, args=("--engine", "faust"))
