"""The benchmark report: ``make bench`` runs every benchmark and writes ``bench/REPORT.md``.

- :mod:`bench.report.steps`: the benchmarks, their sizes (default and ``--quick``) and
  how one runs (a subprocess, ``--json``);
- :mod:`bench.report.provenance`: the machine, the commit and the command each figure
  names;
- :mod:`bench.report.markdown`: the report's sections (and the detection-quality seam);
- :mod:`bench.report.figures`: the PNG plots (matplotlib: the ``bench`` extra);
- :mod:`bench.report.runner`: the command line (``python -m bench.report --help``).
"""
