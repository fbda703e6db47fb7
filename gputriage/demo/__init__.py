"""The embedded demo: a Kafka-compatible broker (Tansu), a scenario player, the scenario.

None of it is needed in production; it is what ``gputriage demo`` runs and what the
tests start their broker with. The scenario is package data, so an installed wheel
runs the demo from any directory.
"""
