"""The PromQL baseline: the incumbent stack's alerts, evaluated by a real Prometheus.

Platform teams run dcgm-exporter + kube-state-metrics + PromQL alerts today. To compare
gputriage with that on the same stream, the stream is turned into the series those
exporters would have exposed at a 30 s scrape (:mod:`bench.promql.series`), backfilled with
``promtool`` and served by ``prometheus`` (:mod:`bench.promql.prometheus`); Prometheus
evaluates the reference document's alerts (``baseline-rules.yaml``) at the 1 m rule interval,
:mod:`bench.promql.alerts` applies ``for:`` as the rule manager does, and
:mod:`bench.promql.match` scores the firings against a truth file. PromQL is never
re-implemented here. Run it as ``python -m bench.promql EVENTS [--truth TRUTH] [-o json]``.
"""
