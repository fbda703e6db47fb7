"""The README and docs/ link to files and sections that exist.

The prose moved out of a 1,500-line README into docs/; a link written for one place
breaks silently when the text or the code it names moves again (a renamed module, a
retitled section). Relative links are checked against the checkout, and a link's
``#anchor`` against the headings of its target, slugged as GitHub slugs them.

Trap: GitHub keeps ``-`` and ``_`` and drops other punctuation, so
``## Kernel-log XIDs (`connect kmsg`)`` is ``#kernel-log-xids-connect-kmsg``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

from tests.paths import DOCS, README, ROOT

PAGES: Final = (README, ROOT / "ARCHITECTURE.md", *sorted(DOCS.glob("*.md")))
_LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE: Final = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _slug(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def _links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        (
            "## Kernel-log XIDs (`connect kmsg`, `ingest kmsg`)",
            "kernel-log-xids-connect-kmsg-ingest-kmsg",
        ),
        (
            "### The faust-streaming engine (`--engine faust`)",
            "the-faust-streaming-engine---engine-faust",
        ),
        ("## Scoring against ground truth", "scoring-against-ground-truth"),
    ],
)
def test_the_slug_rule(heading: str, slug: str) -> None:
    assert _slug(heading.lstrip("#")) == slug


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:: not ours to check offline
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no such section")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_stays_short_and_points_at_every_page() -> None:
    """A newcomer reads it in ten minutes; everything else is one link away."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    linked = {Path(link.partition("#")[0]).name for link in _links(README)}
    assert {page.name for page in DOCS.glob("*.md")} <= linked
