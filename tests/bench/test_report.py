"""The benchmark report runner (``make bench``), end to end at its quick sizes.

One real run of ``python -m bench.report --quick`` (every benchmark, tiny: ~30-40 s on 2
cores, most of it workers joining groups and the latency phases' fixed waits), then
``--render-only`` over its raw results with a detection-quality file added. What must
hold: every section is in REPORT.md, every figure is a real PNG that names the machine,
the commit and the command (under the plot in the Markdown, and in its own text
chunks), and the quality seam includes what is put under its directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from bench.report.markdown import SECTIONS
from bench.report.provenance import commit, cpu_model
from bench.report.steps import BY_NAME, STEPS, batches
from tests.paths import ROOT

pytest.importorskip("matplotlib", reason="the report's figures need the bench extra (make venv)")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_text(data: bytes) -> dict[str, str]:
    """A PNG's ``tEXt`` (and ``zTXt``) chunks, by keyword; every chunk's CRC checked."""
    assert data[:8] == PNG_MAGIC
    chunks: dict[str, str] = {}
    at = 8
    kinds = []
    while at < len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        kind = data[at + 4 : at + 8]
        body = data[at + 8 : at + 8 + length]
        crc = int.from_bytes(data[at + 8 + length : at + 12 + length], "big")
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        kinds.append(kind)
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            chunks[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            chunks[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        at += 12 + length
    assert kinds[0] == b"IHDR"
    assert kinds[-1] == b"IEND"
    assert b"IDAT" in kinds
    return chunks


def report(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.report", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.timeout(200)
def test_quick_report_has_every_section_and_stamped_figures(tmp_path: Path) -> None:
    out = tmp_path / "REPORT.md"
    raw, quality = tmp_path / "raw", tmp_path / "quality"
    paths = ("--report", str(out), "--raw-dir", str(raw), "--quality-dir", str(quality))
    done = report("--quick", *paths)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "elapsed" in done.stderr

    text = out.read_text()
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == list(SECTIONS)
    for step in STEPS:  # each step ran and is in the report, with its command
        assert json.loads((raw / f"{step.name}.json").read_text())["status"] == "ok", step.name
        assert f"`{step.command('quick')}`" in text
    assert "Not run" not in text.split("## Detection quality")[0]
    # The untimed steps ran together, and the report says so; a timed one ran alone.
    assert json.loads((raw / "memory.json").read_text())["beside"] == ["quality"]
    assert json.loads((raw / "core.json").read_text())["beside"] == []
    assert "beside `quality` on the other core" in text
    # The quality step's three subsections, from the shipped simulate and score commands.
    section = text.split("## Detection quality", 1)[1].split("\n## ", 1)[0]
    assert "### A simulated 20-node, 1 h day" in section
    assert "gputriage simulate --nodes 20 --duration 1h" in section
    assert "--out bench/out/quick/quality-run/day/events.jsonl" in section, "paths from the root"
    assert str(ROOT) not in section
    assert "| type | tp | fp | fn | precision | recall |" in section
    assert "### Noise only: no fault, no incident" in section
    assert "### Side by side with the PromQL baseline" in section

    short = commit().short
    images = [line for line in text.splitlines() if line.startswith("![")]
    assert len(images) == 3  # pipeline, latency, memory
    lines = text.splitlines()
    for image in images:
        link = image.split("](", 1)[1].rstrip(")")
        data = (out.parent / link).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 20_000  # a drawn plot, not an empty canvas
        meta = png_text(data)
        assert cpu_model() in meta["Description"]
        assert short in meta["Description"]
        assert meta["Source"].startswith("python -m bench.")
        assert meta["Source"] in meta["Description"]
        caption = lines[lines.index(image) + 2]
        assert caption.startswith("*Machine: ")
        assert cpu_model() in caption
        assert f"Commit: {short}" in caption
        assert f"from `{meta['Source']}`" in caption

    # The seam: a later step's result under the quality directory becomes a subsection.
    quality.mkdir()
    (quality / "score.json").write_text(
        json.dumps(
            {
                "title": "gputriage score on the simulated stream",
                "command": "gputriage score truth.jsonl incidents.jsonl",
                "metrics": {"precision": 0.97, "recall": 0.93},
            }
        )
    )
    (quality / "broken.json").write_text("{not json")
    again = report("--render-only", *paths)
    assert again.returncode == 0, again.stderr[-4000:]
    text = out.read_text()
    section = text.split("## Detection quality", 1)[1].split("\n## ", 1)[0]
    assert "### gputriage score on the simulated stream" in section
    assert "`gputriage score truth.jsonl incidents.jsonl`" in section
    assert "| recall | 0.93 |" in section
    assert "*Unreadable*:" in section
    assert "broken.json" in section


def test_only_untimed_steps_share_a_batch_and_the_order_holds() -> None:
    plan = batches(list(STEPS))
    assert [step.name for batch in plan for step in batch] == [step.name for step in STEPS]
    together = [batch for batch in plan if len(batch) > 1]
    assert [[step.name for step in batch] for batch in together] == [["memory", "quality"]]
    alone = batches([BY_NAME["quality"], BY_NAME["core"]])
    assert [[step.name for step in batch] for batch in alone] == [["quality"], ["core"]]
    three = [BY_NAME["memory"], BY_NAME["quality"], replace(BY_NAME["memory"], name="third")]
    assert [[step.name for step in batch] for batch in batches(three)] == [
        ["memory", "quality"],
        ["third"],
    ], "two at a time: one per core"


def test_steps_not_run_say_so_and_how(tmp_path: Path) -> None:
    out = tmp_path / "REPORT.md"
    done = report("--quick", "--only", "kmsg", "--report", str(out), "--raw-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    text = out.read_text()
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == list(SECTIONS)
    core = text.split("## Core: events/s on one core", 1)[1].split("\n## ", 1)[0]
    assert "*Not run*" in core
    assert "python -m bench.core_bench" in core
    assert "lines/s" in text  # the one step that ran
    assert not (tmp_path / "figures").exists()


def test_cli_mistakes_are_one_line(tmp_path: Path) -> None:
    done = report("--only", "nosuch", "--raw-dir", str(tmp_path))
    assert done.returncode == 2
    assert "unknown step(s) nosuch" in done.stderr
    assert "Traceback" not in done.stderr
    done = report("--render-only", "--raw-dir", str(tmp_path / "empty"))
    assert done.returncode == 2
    assert "no run recorded" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_worker_rate_not_timed_is_drawn_as_such_not_a_crash() -> None:
    """At quick sizes the worker's first commit can cover the whole backlog, and its rate
    is NaN (nothing left to time): the figure must still draw, and say so."""
    from bench.report import figures  # noqa: PLC0415 - needs matplotlib (skipped above)

    result = {
        "produce": {"records_per_s": 90_000.0},
        "aiokafka": {"events_per_s": 100_000.0},
        "plain_pipeline": {"events_per_s": 40_000.0},
        "processor": {"events_per_s": float("nan")},
    }
    figure = figures.pipeline(result, 0.4)
    said = [text.get_text() for text in figure.axes[0].texts]
    assert any("not timed" in text for text in said), said
    assert any("40,000/s = 0.40 x (a)" in text for text in said), said
    left, right = figure.axes[0].get_xlim()
    assert left <= 0
    assert 100_000 < right < float("inf")
