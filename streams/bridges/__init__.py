"""The bridges: the second application on the incident topic, beside the processor.

A bridge is a consumer group on the incident topic that hands each incident's lifecycle
to one vendor's endpoint (:mod:`connectors.bridges`), once per matching route:
``runner`` (lanes, retries, commits), ``ledger`` (what was delivered, on a compacted
topic), ``storms`` (folding a burst into one page), ``metrics`` and ``settings``.
It shares the processor's group discipline (:mod:`streams.app.group`: the rebalance
listener, the committable offsets and the commit) and nothing else of it.
"""
