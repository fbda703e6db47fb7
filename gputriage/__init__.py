"""gputriage: the command line and the glue between connectors and the correlation core."""
