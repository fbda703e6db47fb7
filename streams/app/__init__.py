"""The live processor: the pure core (``streams.core``) on Kafka, with aiokafka.

``pipeline`` is the transport-free glue (decode, dead letters, the correlator,
snapshots); ``metrics`` the Prometheus side; ``worker`` the consumer-group member
(``offsets`` what it may commit, ``changelog`` its state topic).
"""
