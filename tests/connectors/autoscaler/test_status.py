"""The ``cluster-autoscaler-status`` ConfigMap parser on the corpus (both formats)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from connectors.autoscaler.status import Status, facts, go_time, new_facts, parse_status
from schemas.codec import RecordError
from tests.paths import DATA

OBSERVED = datetime(2026, 12, 1, tzinfo=UTC)


def corpus(name: str) -> Status:
    status = parse_status((DATA / "autoscaler" / name).read_text())
    assert isinstance(status, Status)
    return status


def test_text_format_backoff_without_a_cause() -> None:
    status = corpus("ca_status_text.txt")
    assert status.time == datetime(2019, 9, 2, 14, 57, 47, 683724, tzinfo=UTC)
    (group,) = status.groups
    assert (group.name, group.health, group.scale_up) == (
        "work-default-eks-spot1",
        "Healthy",
        "Backoff",
    )
    assert (group.min_size, group.max_size, group.target) == (1, 7, 1)
    assert group.since == datetime(2019, 9, 2, 14, 57, 6, 260551, tzinfo=UTC)
    (fact,) = facts(status, "c1", OBSERVED)
    assert (fact.action, fact.reason, fact.node_group, fact.max_size) == (
        "backoff",
        "backoff",
        "work-default-eks-spot1",
        7,
    )
    assert fact.time == status.time
    assert fact.until is None


def test_a_size_of_more_than_nine_digits_is_not_read() -> None:
    """A larger number is no node group's size: an int() of 5,000 digits raised, and a
    record carrying 10**23 would be refused by the codec at the processor."""
    text = (DATA / "autoscaler" / "ca_status_text.txt").read_text()
    huge = text.replace("maxSize=7", "maxSize=" + "9" * 5000)
    assert huge != text
    status = parse_status(huge)
    assert isinstance(status, Status)
    assert status.groups[0].max_size is None
    (fact,) = facts(status, "c1", OBSERVED)
    assert fact.max_size is None


def test_a_status_nested_ten_thousand_deep_is_a_record_error() -> None:
    result = parse_status("nodeGroups: " + "[" * 10_000 + "]" * 10_000)
    assert isinstance(result, RecordError)
    assert "nested too deep" in result.reason


def test_text_format_cut_after_the_group_name() -> None:
    status = corpus("ca_status_text_aks2023.txt")
    assert [g.name for g in status.groups] == ["aks-cpunp-38371103-vmss"]
    assert facts(status, "c1", OBSERVED) == ()


def test_yaml_format_backoff_with_its_cloud_cause() -> None:
    status = corpus("ca_status_yaml.yaml")
    (group,) = status.groups
    assert (group.min_size, group.max_size, group.target) == (2, 12, 8)
    (fact,) = facts(status, "c1", OBSERVED)
    assert (fact.action, fact.reason, fact.cloud_code, fact.cloud) == (
        "backoff",
        "quota",
        "QUOTA_EXCEEDED",
        "gce",
    )
    assert "Quota 'CPUS' exceeded" in fact.message
    assert fact.time == datetime(2023, 11, 24, 4, 28, 19, 546750, tzinfo=UTC)


def test_yaml_format_gke_unquoted_time_and_mig_url() -> None:
    status = corpus("ca_status_yaml_gke_pr6375.yaml")
    assert status.time == datetime(2023, 12, 20, 10, 52, 4, 558615, tzinfo=UTC)
    (group,) = status.groups
    assert group.name.endswith("gke-sample-cluster-default-pool-40ce0341-grp")
    assert group.health == "Healthy"
    assert group.scale_up == ""
    assert facts(status, "c1", OBSERVED) == ()


def test_only_new_facts_are_emitted_and_ids_are_deterministic() -> None:
    status = corpus("ca_status_yaml.yaml")
    first = new_facts(status, None, "c1", OBSERVED)
    assert len(first) == 1
    assert new_facts(status, status, "c1", OBSERVED) == ()  # a resync: nothing new
    again = parse_status((DATA / "autoscaler" / "ca_status_yaml.yaml").read_text())
    assert isinstance(again, Status)
    assert new_facts(again, None, "c1", OBSERVED)[0].id == first[0].id
    full = replace(status.groups[0], target=12, scale_up="InProgress")
    grown = replace(status, groups=(full,))
    changed = new_facts(grown, status, "c1", OBSERVED)
    assert [(f.action, f.size_to) for f in changed] == [
        ("scale_up_planned", 12),
        ("max_size_reached", None),
    ]


def test_neither_format_is_a_record_error() -> None:
    assert isinstance(parse_status("- just\n- a list\n"), RecordError)
    assert isinstance(parse_status("key: [unclosed"), RecordError)


def test_go_times() -> None:
    assert go_time("2019-09-02 14:57:47.467422992 +0000 UTC m=+238.237952298") == datetime(
        2019, 9, 2, 14, 57, 47, 467422, tzinfo=UTC
    )
    assert go_time("2023-12-20T10:52:04.558615784Z") == datetime(
        2023, 12, 20, 10, 52, 4, 558615, tzinfo=UTC
    )
    assert go_time("no time") is None
