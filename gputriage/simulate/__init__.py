"""``gputriage simulate``: a seeded GPU-cluster event stream and its ground truth.

One generator for the benchmarks and for users: a fleet of 8-GPU nodes (H100, A100,
H200), its workloads and their churn, healthy noise, and injected faults, each with the
incident the domain says it must give (``schemas/truth.py``). Modules: ``spec`` (what to
simulate, ``GENERATOR_VERSION``), ``catalogue``, ``model`` (the mutable cluster),
``fleet`` (record builders, the event loop), ``noise``, ``faults`` and ``scaling`` (the
injected faults), ``autoscaler`` (records read by the connector's parser), ``dra`` and
``dra_records`` (a DRA node pool beside the fleet, ``--dra-nodes``), ``truth`` and
``cluster_truth`` (the recorders), ``stream`` (the API) and ``run`` (the command).
docs/replay.md, design notes: the simulator's modules.
"""

from gputriage.simulate.spec import EVENTS_PER_NODE_HOUR, FAULTS, GENERATOR_VERSION, StreamSpec
from gputriage.simulate.stream import (
    Simulation,
    generate_events,
    generate_lines,
    open_output,
    read_lines,
    write_lines,
)

__all__ = [
    "EVENTS_PER_NODE_HOUR",
    "FAULTS",
    "GENERATOR_VERSION",
    "Simulation",
    "StreamSpec",
    "generate_events",
    "generate_lines",
    "open_output",
    "read_lines",
    "write_lines",
]
