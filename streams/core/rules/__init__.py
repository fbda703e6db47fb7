"""One module per incident type. Each exposes handlers that mutate a
:class:`~streams.core.lifecycle.Step`; none does I/O or reads a clock."""
