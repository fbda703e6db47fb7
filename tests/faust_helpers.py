"""Running ``gputriage process --engine faust`` workers against the test broker.

The same subprocess as :class:`tests.processor_helpers.Worker` (its log, ``kill``,
``stop``), started with ``--engine faust``: the default engine's helpers read its
log and the group's offsets unchanged.
"""

from __future__ import annotations

from pathlib import Path

from tests.kafka_helpers import KafkaTestEnv
from tests.processor_helpers import Worker


class FaustWorker(Worker):
    """One ``python -m gputriage process --engine faust`` subprocess."""

    def __init__(
        self,
        kafka: KafkaTestEnv,
        app_id: str,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(kafka, app_id, log_path, extra_env, args=("--engine", "faust"))
