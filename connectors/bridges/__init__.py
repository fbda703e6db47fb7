"""Bridges: consumers of the incident topic that deliver each incident's lifecycle to people.

One runner (:mod:`connectors.bridges.runner`) owns Kafka, the durable ledger of what
was delivered, routes, retries, storms, dead letters and metrics; one endpoint per
vendor (:mod:`connectors.bridges.pagerduty`, ``slack``, ``alertmanager``, ``webhook``)
owns only the vendor's format and HTTP semantics, behind :mod:`connectors.bridges.base`.
"""
