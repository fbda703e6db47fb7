"""``gputriage writeback``: incidents back into Kubernetes (pod and node Events, opt-in node marks).

:mod:`.plan` decides (pure), :mod:`.events` and :mod:`.marks` write through the API,
:mod:`.breaker` bounds the marks, :mod:`.runner` reads the incident topic and converges.
"""
