"""``gputriage simulate``: a seeded GPU-cluster event stream and its ground truth.

One generator for the benchmarks and for users: a fleet of 8-GPU nodes (H100, A100,
H200), its workloads and their churn, healthy noise, and injected faults, each with
the incident the domain says it must give (``schemas/truth.py``). Modules:

* :mod:`~gputriage.simulate.spec`: what to simulate, and ``GENERATOR_VERSION``;
* :mod:`~gputriage.simulate.catalogue`: products, regions, workloads, texts;
* :mod:`~gputriage.simulate.model`: the mutable cluster model;
* :mod:`~gputriage.simulate.fleet`: the fleet, record builders and the event loop;
* :mod:`~gputriage.simulate.noise`: background traffic and healthy failures;
* :mod:`~gputriage.simulate.faults`: the injected faults and their truth;
* :mod:`~gputriage.simulate.scaling`: the autoscaler's faults (cluster-scoped);
* :mod:`~gputriage.simulate.autoscaler`: node groups and autoscaler records, read by
  the autoscaler connector's parser;
* :mod:`~gputriage.simulate.truth`: the truth recorder;
* :mod:`~gputriage.simulate.cluster_truth`: the counted cluster-scoped truths;
* :mod:`~gputriage.simulate.stream`: the API (events, lines, files);
* :mod:`~gputriage.simulate.run`: the command's run function.
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
