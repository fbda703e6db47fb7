"""Kafka client pieces every process shares.

``config`` turns settings into client arguments, ``admin`` creates and checks
topics, ``producer`` sends typed events and dead letters.
"""
