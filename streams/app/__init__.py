"""The live processor: the pure core (``streams.core``) on Kafka, with faust-streaming.

``pipeline`` is the transport-free glue (decode, dead letters, the correlator,
snapshots); ``metrics`` the Prometheus side; ``faust_app`` the faust worker.
"""
