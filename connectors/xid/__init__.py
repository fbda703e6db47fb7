"""The kernel-log XID source: line parser, /dev/kmsg reader, journal follower, offline ingest."""
