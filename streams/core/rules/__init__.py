"""The rules, one module per rule. Each exposes handlers that mutate a
:class:`~streams.core.lifecycle.Step` (none does I/O or reads a clock) and a ``SPEC``
(:mod:`streams.core.rules.spec`) listed in :mod:`streams.core.rules.registry`; helper
modules (``pods``, ``labels``, ``disruption``, ``gpuids``) have none. Every module here is
compiled by ``make native`` without being listed (:func:`schemas.native.rule_modules`)."""
