"""``python -m bench.report``: see :mod:`bench.report.runner`."""

from bench.report.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
