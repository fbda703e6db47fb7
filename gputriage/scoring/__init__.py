"""Scoring the core against ground truth (``gputriage score EVENTS TRUTH``).

A replay of EVENTS (:func:`gputriage.replay.correlate`, the replay's own loop) gives
incidents; :mod:`~gputriage.scoring.matching` pairs them one-to-one with the
expectations of TRUTH (``truth.v1``, :mod:`schemas.truth`, read by
:mod:`~gputriage.scoring.truth_file`); :mod:`~gputriage.scoring.metrics` turns the
pairing into precision, recall and detection delay per type and a confusion table;
:mod:`~gputriage.scoring.report` prints them; :mod:`~gputriage.scoring.run` ties it
together for the CLI. Everything but ``run`` and ``truth_file`` is pure.
"""
