"""``python -m bench.promql EVENTS [--truth TRUTH.jsonl] [-o table|json]``: the PromQL baseline.

Mistakes (a missing file, a bad record, several clusters and no ``--cluster``, no
Prometheus) are one line on stderr and exit 1, never a traceback.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from bench.promql.alerts import Firing
from bench.promql.match import LATE_SECONDS, score, types_of
from bench.promql.prometheus import PrometheusError
from bench.promql.run import RULES, Baseline, evaluate
from bench.promql.verify import verify as verify_firings
from connectors.files import FileReader, read_records
from schemas.codec import RecordError, dumps
from schemas.events import Event
from schemas.truth import ExpectedIncident, decode_truth

SHOWN_LABELS = ("node", "Hostname", "namespace", "pod", "container", "gpu", "UUID")


def _read_events(path: str) -> list[Event]:
    events: list[Event] = []
    with FileReader(path) as source:
        for record in read_records(source):
            if isinstance(record.event, RecordError):
                raise click.ClickException(f"{record.source}:{record.line}: {record.event}")
            events.append(record.event)
    return events


def _read_truth(path: str) -> list[ExpectedIncident]:
    expected = []
    with FileReader(path) as source:
        for number, line in source.lines():
            try:
                if isinstance(line, RecordError):  # over-long
                    raise line
                expected.append(decode_truth(line))
            except RecordError as exc:
                raise click.ClickException(f"{source.name}:{number}: {exc}") from None
    return expected


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return "firing"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _firing_dict(firing: Firing) -> dict[str, object]:
    return {
        "alert": firing.alert,
        "labels": dict(firing.labels),
        "active_at": _iso(firing.active_at),
        "start": _iso(firing.start),
        "end": None if firing.end is None else _iso(firing.end),
    }


def _report(
    baseline: Baseline, truth: Sequence[ExpectedIncident] | None, late: float
) -> dict[str, Any]:
    scraped = baseline.scraped
    report: dict[str, Any] = {
        "stream": {
            "scrape_interval_s": 30,
            "rule_interval_s": 60,
            "scrapes_from": _iso(scraped.first),
            "scrapes_to": _iso(scraped.last),
            "series": sum(len(s) for s in scraped.series.values()),
            "samples": scraped.sample_count(),
            "xid_records": scraped.xids,
            "xid_gauge_changes_seen": scraped.xids_visible,
        },
        "rules": [
            {"alert": r.name, "for_s": r.for_seconds, "types": list(types_of(r.annotations))}
            for r in baseline.rules
        ],
        "firings": [_firing_dict(f) for f in baseline.firings],
    }
    if truth is not None:
        alert_types = {r.name: types_of(r.annotations) for r in baseline.rules}
        types, alerts = score(baseline.firings, alert_types, truth, late)
        report["types"] = [t.as_dict() for t in types]
        report["alerts"] = [a.as_dict() for a in alerts]
    return report


def _table(report: dict[str, Any]) -> None:
    stream = report["stream"]
    click.echo(
        f"scraped {stream['series']} series, {stream['samples']} samples every 30 s "
        f"({stream['scrapes_from']} .. {stream['scrapes_to']}); rules every 60 s"
    )
    click.echo(
        f"XIDs: {stream['xid_records']} records in the stream, "
        f"{stream['xid_gauge_changes_seen']} seen as a change of DCGM_FI_DEV_XID_ERRORS"
    )
    click.echo(f"\n{'alert':<28} {'start':<21} {'end':<21} subject")
    for f in report["firings"]:
        subject = (
            ",".join(f"{k}={v}" for k, v in f["labels"].items() if k in SHOWN_LABELS) or "(cluster)"
        )
        click.echo(f"{f['alert']:<28} {f['start']:<21} {f['end'] or 'firing':<21} {subject}")
    if "types" in report:
        click.echo(
            f"\n{'incident type':<28} {'expected':>8} {'caught':>6} {'delay p50':>10} "
            f"{'max':>7}  alerts"
        )
        for t in report["types"]:
            p50 = "" if t["delay_median_s"] is None else f"{t['delay_median_s']:.0f} s"
            worst = "" if t["delay_max_s"] is None else f"{t['delay_max_s']:.0f} s"
            alerts = ",".join(t["alerts"]) or "(none)"
            counts = f"{t['expected']:>8} {t['caught']:>6}"
            click.echo(f"{t['type']:<28} {counts} {p50:>10} {worst:>7}  {alerts}")
            if t["caught"] < t["expected"] and t["limits"]:
                click.echo(f"{'':<28}   why: {t['limits']}")
        click.echo(f"\n{'alert':<28} {'firings':>7} {'true':>5} {'false':>5}  confused with")
        for a in report["alerts"]:
            confused = ",".join(f"{k}:{v}" for k, v in a["confused_with"].items())
            click.echo(
                f"{a['alert']:<28} {a['firings']:>7} {a['true']:>5} {a['false']:>5}  {confused}"
            )
    if "verified" in report:
        v = report["verified"]
        click.echo(
            f"\nverified: promtool test rules agrees on {v['firings']} firings "
            f"({v['checks']} alert x evaluation checks, the stream moved to 1970)"
        )


def _verify(stream: list[Event], rules: Path, cluster: str, keep: Path | None) -> dict[str, int]:
    if keep is not None:
        done = verify_firings(stream, keep / "verify", rules=rules, cluster=cluster)
    else:
        with tempfile.TemporaryDirectory(prefix="promql-verify-") as tmp:
            done = verify_firings(stream, Path(tmp), rules=rules, cluster=cluster)
    return {"firings": done.firings, "checks": done.checks}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("events", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--truth",
    type=click.Path(dir_okay=False, exists=True),
    help="truth.v1 JSON lines (gputriage simulate --truth): score the firings against it.",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--cluster",
    default="",
    help="The cluster to evaluate (required when the stream holds several).",
)
@click.option(
    "--rules",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=RULES,
    show_default=True,
    help="The alerting rules file.",
)
@click.option(
    "--late",
    type=click.FloatRange(min=0),
    default=LATE_SECONDS,
    show_default=True,
    help="Seconds past a truth's not_after a firing may start and still catch it.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Also have promtool test rules (Prometheus' rule manager) confirm every firing, "
    "on the stream moved to 1970 (bench/promql/verify.py says how).",
)
@click.option(
    "--all-series",
    is_flag=True,
    help="Backfill every series the exporters expose, not only those the rules select "
    "(slower; the firings are the same: bench/promql/selection.py says why).",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the OpenMetrics file, blocks and server log in this directory.",
)
def main(
    events: str,
    truth: str | None,
    output: str,
    cluster: str,
    rules: Path,
    late: float,
    verify: bool,
    all_series: bool,
    keep: Path | None,
) -> None:
    """Evaluate the reference document's PromQL alerts over EVENTS with a real Prometheus.

    The stream is turned into kube-state-metrics and dcgm-exporter series as a 30 s scrape
    would have stored them, backfilled with promtool, served by prometheus, and every
    alerting rule is evaluated with query_range at the rule interval (1 m).
    """
    try:
        stream = _read_events(events)
        expected = _read_truth(truth) if truth else None
    except OSError as exc:
        raise click.ClickException(f"{exc.filename or events}: {exc.strerror or exc}") from None
    clusters = sorted({e.cluster for e in stream})
    if not cluster and len(clusters) > 1:
        raise click.ClickException(
            f"the stream holds clusters {', '.join(clusters)}: choose one with --cluster "
            "(one Prometheus per cluster)"
        )
    if expected is not None and (cluster or clusters):
        chosen = cluster or clusters[0]
        expected = [x for x in expected if x.cluster == chosen]
    try:
        baseline = evaluate(
            stream, rules=rules, cluster=cluster, workdir=keep, all_series=all_series
        )
    except (PrometheusError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    report = _report(baseline, expected, late)
    if verify:
        try:
            report["verified"] = _verify(stream, rules, cluster, keep)
        except (PrometheusError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    if output == "json":
        sys.stdout.buffer.write(dumps(report) + b"\n")
    else:
        _table(report)


if __name__ == "__main__":
    main(prog_name="python -m bench.promql")
