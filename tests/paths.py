"""Where the checkout's files are, for tests in any folder depth.

Tests live in folders that mirror the packages (``tests/connectors/k8s/``...),
so ``Path(__file__).parent`` means something different in each: name the
checkout's places here once instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
"""The checkout."""
DATA: Final = ROOT / "tests" / "data"
"""Recorded source data (Kubernetes objects, kernel logs, dcgm scrapes)."""
EXAMPLES: Final = ROOT / "examples"
DEPLOY: Final = ROOT / "deploy"
README: Final = ROOT / "README.md"
"""Figures quoted there are asserted by the tests that measure them."""
DOCS: Final = ROOT / "docs"
"""The documentation pages; figures quoted there are asserted by the tests that measure them."""
