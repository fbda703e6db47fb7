"""Bridge endpoints: the sinks that turn one incident revision into one vendor's request.

One module per vendor (:mod:`connectors.bridges.pagerduty`, ``slack``, ``alertmanager``,
``webhook``) owns only the vendor's format and HTTP semantics, behind
:mod:`connectors.bridges.base`; :mod:`connectors.bridges.registry` names them, and
:mod:`connectors.bridges.scrub` keeps the routes' secrets out of every text. The
application that drives them (consumer group, ledger, storms, retries) is
:mod:`streams.bridges`: the endpoints never import it.
"""
