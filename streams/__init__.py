"""Stream processing: the pure correlation core (``streams.core``) and its configuration."""
