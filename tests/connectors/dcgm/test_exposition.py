"""Parsing real dcgm-exporter scrapes (tests/data/dcgm/, sources cited in each file)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.dcgm.exposition import XID_COUNT, XID_GAUGE, Scrape, parse_exposition
from schemas.codec import RecordError
from schemas.events import PodRef
from tests import paths

DATA = paths.DATA / "dcgm"
RTX = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"
A30 = "GPU-265c9814-6156-355b-e589-ff2064894f16"


def scrape_of(name: str) -> Scrape:
    result = parse_exposition((DATA / name).read_text())
    assert isinstance(result, Scrape), result
    return result


def test_kubernetes_scrape_gives_identity_pods_and_the_xid_gauge() -> None:
    scrape = scrape_of("rtx4000_k8s.prom")
    assert list(scrape.gpus) == [RTX]
    gpu = scrape.gpus[RTX]
    assert gpu.pci_bus_id == "0000:00:02.0"  # NVML's 00000000:00:02.0, canonical
    assert (gpu.gpu_index, gpu.device, gpu.model) == (
        0,
        "nvidia0",
        "NVIDIA RTX 4000 Ada Generation",
    )
    assert gpu.hostname == "lke529760-766837-0a634ab30000"
    assert gpu.pods == (
        PodRef(namespace="default", name="cuda-75454ffb9f-8ljq7", container="cuda"),
    )
    # err_code/err_msg are values, not identity: still one GPU.
    assert (gpu.xid_last, gpu.xid_text) == (0, "No Error")
    assert gpu.xid_counts is None  # the count metric is off by default
    assert scrape.series == 8
    assert scrape.time is None  # the exporter writes no timestamps


def test_mig_instances_are_separate_gpus_of_one_parent() -> None:
    scrape = scrape_of("a30_mig.prom")
    assert list(scrape.gpus) == [
        f"{A30}/GI3",
        f"{A30}/GI4",
        f"{A30}/GI5",
        f"{A30}/GI6",
        "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49/GI3",
        "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49/GI4",
    ]
    gi4 = scrape.gpus[f"{A30}/GI4"]
    assert (gi4.uuid, gi4.mig_instance, gi4.mig_profile) == (A30, "4", "1g.6gb")
    assert (gi4.gpu_instance, gi4.gpu_index) == (4, 0)  # the parent's index ("gpu")
    assert gi4.pci_bus_id == ""  # 3.x exporters had no pci_bus_id label
    assert gi4.hostname == "yg-data-k8s-gpu-a30-node-test-test0003.mt"  # "Hostname"


def test_a_mig_instance_carries_its_parents_bus_id_when_the_exporter_has_the_label() -> None:
    """Exporters since NVIDIA/dcgm-exporter#326 put ``pci_bus_id`` (NVML's spelling) on every
    series; on a MIG GPU it is the parent's, shared by all its instances. The a30_mig.prom
    lines, with the label added the way #326's example output writes it."""
    text = (DATA / "a30_mig.prom").read_text()
    labelled = text.replace(f'UUID="{A30}",', f'UUID="{A30}",pci_bus_id="00000000:41:00.0",')
    scrape = parse_exposition(labelled)
    assert isinstance(scrape, Scrape)
    ours = [g for g in scrape.gpus.values() if g.uuid == A30]
    assert [(g.gpu_instance, g.pci_bus_id, g.gpu_index) for g in ours] == [
        (3, "0000:41:00.0", 0),
        (4, "0000:41:00.0", 0),
        (5, "0000:41:00.0", 0),
        (6, "0000:41:00.0", 0),
    ]


def test_instance_zero_is_an_instance_and_dcgm_blank_profiles_are_empty() -> None:
    """NVIDIA/dcgm-exporter#713: a whole-GPU MIG instance has ``GPU_I_ID="0"`` (and DCGM's
    profile ``7g.79gb`` where the node says 7g.80gb: kept as written, it is no key);
    NVIDIA/gpu-monitoring-tools#193: ``GPU_I_PROFILE="<<<NULL>>>"`` is DCGM's blank."""
    scrape = scrape_of("mig_instance_0_and_null_profile.prom")
    whole = scrape.gpus["GPU-06357e72-c3ee-614b-775f-a89e18e8cc08/GI0"]
    assert (whole.gpu_instance, whole.mig_instance, whole.mig_profile) == (0, "0", "7g.79gb")
    assert whole.pods == ()  # pod="" is no pod
    null = scrape.gpus["GPU-fc6d497e-d08c-374e-218c-7e44b065d764/GI6"]
    assert (null.gpu_instance, null.mig_profile) == (6, "")


def test_a_gpu_instance_id_that_is_no_number_is_an_error() -> None:
    text = (DATA / "a30_mig.prom").read_text().replace('GPU_I_ID="4"', 'GPU_I_ID="four"', 1)
    error = parse_exposition(text)
    assert isinstance(error, RecordError)
    assert "GPU_I_ID 'four' is not a GPU instance id" in str(error)
    # A zero-padded id is the same instance as the unpadded one.
    padded = (DATA / "a30_mig.prom").read_text().replace('GPU_I_ID="4"', 'GPU_I_ID="04"', 1)
    scrape = parse_exposition(padded)
    assert isinstance(scrape, Scrape)
    assert scrape.gpus[f"{A30}/GI4"].gpu_instance == 4


def test_old_namespace_labels_uuid_and_empty_pods() -> None:
    scrape = scrape_of("a100_mig_old_namespace.prom")
    gpu = scrape.gpus["GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167/GI2"]
    assert (gpu.uuid, gpu.mig_profile) == ("GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167", "4g.40gb")
    assert gpu.pods == ()  # pod_name="" is no pod
    text = (DATA / "a100_mig_old_namespace.prom").read_text()
    filled = text.replace('pod_name=""', 'pod_name="a-0"', 1).replace(
        'pod_namespace=""', 'pod_namespace="ml"', 1
    )
    parsed = parse_exposition(filled)
    assert isinstance(parsed, Scrape)
    first = parsed.gpus["GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167/GI1"]
    assert first.pods == (PodRef(namespace="ml", name="a-0"),)


def test_count_metric_by_code_and_the_zero_series() -> None:
    scrape = scrape_of("xid_count.prom")
    with_xid = scrape.gpus["GPU-b9f9e81b-bee7-34bc-af17-132ef6592740"]
    assert (with_xid.xid_counts, with_xid.window_ms) == ({42: 1}, 300000)
    without = scrape.gpus["GPU-41cc2907-3249-5a6b-f0e4-d04063b183a9"]
    assert without.xid_counts == {}  # exported, nothing in the window
    assert (without.hostname, without.pci_bus_id) == ("ip-172-31-16-106", "0000:00:1c.0")


def test_time_sliced_gpu_lists_every_pod_once() -> None:
    line = (DATA / "rtx4000_k8s.prom").read_text().splitlines()[-1]
    other = line.replace("cuda-75454ffb9f-8ljq7", "cuda-75454ffb9f-zzzzz")
    parsed = parse_exposition("\n".join([line, other, line]) + "\n")
    assert isinstance(parsed, Scrape)
    names = [p.name for p in parsed.gpus[RTX].pods]
    assert names == ["cuda-75454ffb9f-8ljq7", "cuda-75454ffb9f-zzzzz"]


def test_the_exporters_metric_names_match_its_counters_file() -> None:
    # default-counters.csv is the exporter's own list (NVIDIA/dcgm-exporter etc/).
    csv = (DATA / "default-counters.csv").read_text()
    assert f"\n{XID_GAUGE}," in csv
    assert f"\n# {XID_COUNT}," in csv  # present, but commented out: off by default


def test_timestamps_become_the_scrape_time() -> None:
    text = f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} 79 1764550000000\n'
    parsed = parse_exposition(text)
    assert isinstance(parsed, Scrape)
    assert parsed.time is not None
    assert parsed.time.timestamp() == 1764550000.0


def test_bad_expositions_are_errors_with_a_reason() -> None:
    cases = {
        "<html><body>502 Bad Gateway</body></html>\n": "invalid Prometheus text",
        "# HELP x y\n": "no GPU series",
        f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} 79.5\n': "not a non-negative integer",
        f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} -1\n': "not a non-negative integer",
        f'{XID_GAUGE}{{gpu="0",UUID="{RTX}",pci_bus_id="zz"}} 0\n': "not a PCI bus id",
        f'{XID_COUNT}{{gpu="0",UUID="{RTX}",xid="abc"}} 1\n': "non-numeric xid",
        f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} NaN\n': "not a non-negative integer",
    }
    for text, reason in cases.items():
        result = parse_exposition(text)
        assert isinstance(result, RecordError), text
        assert reason in result.reason, (text, result.reason)


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        (f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} 1e23\n', XID_GAUGE, "out of range"),
        (f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} 65536\n', XID_GAUGE, "out of range"),
        (f'{XID_COUNT}{{gpu="0",UUID="{RTX}",xid="65536"}} 1\n', "xid", "out of range"),
        (f'{XID_COUNT}{{gpu="0",UUID="{RTX}",xid="{"9" * 5000}"}} 1\n', "xid", "out of range"),
        (
            "".join(
                f'{XID_GAUGE}{{gpu="0",UUID="{RTX}",namespace="ml",pod="p-{i}"}} 0\n'
                for i in range(1100)
            ),
            "pod",
            "1100 pods on GPU",
        ),
        (f'{XID_GAUGE}{{gpu="0",UUID="{RTX}",namespace="ml",pod="{"p" * 254}"}} 0\n', "pod", ""),
        (f'{XID_GAUGE}{{gpu="0",UUID="{RTX}",namespace="{"n" * 64}",pod="p"}} 0\n', "pod", ""),
    ],
    ids=[
        "gauge-1e23",
        "gauge-65536",
        "count-65536",
        "count-5000-digits",
        "1100-pods",
        "name",
        "ns",
    ],
)
def test_values_past_the_schemas_bounds_are_errors_here(text: str, field: str, reason: str) -> None:
    """What the codec would refuse at the processor is refused where it is read."""
    result = parse_exposition(text)
    assert isinstance(result, RecordError), text[:200]
    assert result.field == field
    assert reason in result.reason


def test_a_gpu_index_no_nvml_gives_is_unknown() -> None:
    scrape = parse_exposition(f'{XID_GAUGE}{{gpu="{10**23}",UUID="{RTX}"}} 0\n')
    assert isinstance(scrape, Scrape)
    assert scrape.gpus[RTX].gpu_index is None  # as for an index that is no number


def test_the_largest_xid_code_and_a_full_node_of_pods_are_read() -> None:
    pods = "".join(
        f'{XID_GAUGE}{{gpu="0",UUID="{RTX}",namespace="ml",pod="p-{i}"}} 65535\n'
        for i in range(1024)
    )
    scrape = parse_exposition(pods)
    assert isinstance(scrape, Scrape)
    assert (scrape.gpus[RTX].xid_last, len(scrape.gpus[RTX].pods)) == (65535, 1024)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    result = parse_exposition(text)
    assert isinstance(result, Scrape | RecordError)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='{}",=\\# \nUID0123456789.eE+-xDCGM_FIXERORS', max_size=120))
def test_near_miss_expositions_never_raise(text: str) -> None:
    result = parse_exposition(f'{XID_GAUGE}{{gpu="0",UUID="{RTX}"}} 0\n' + text)
    assert isinstance(result, Scrape | RecordError)


PROM_IDLE = "GPU-5d0a7c3e-2f41-4b8e-9c6d-1e7f3a9b2c40"


def test_through_prometheus_the_exported_labels_name_the_workload_not_the_exporter() -> None:
    # honor_labels: false renamed the pod mapper's pod/namespace/container exported_*; the
    # plain ones are the ServiceMonitor's target labels: the exporter pod itself.
    scrape = scrape_of("prometheus/01.prom")
    assert list(scrape.gpus) == [RTX, PROM_IDLE]
    busy = scrape.gpus[RTX]
    assert busy.pods == (
        PodRef(namespace="default", name="cuda-75454ffb9f-8ljq7", container="cuda"),
    )
    assert (busy.pci_bus_id, busy.gpu_index, busy.xid_last) == ("0000:00:02.0", 0, 0)
    # The idle GPU's empty pod labels were dropped by Prometheus, so only the target's
    # pod="nvidia-dcgm-exporter-tvmlp" is left on it: it is the exporter, not a workload.
    assert scrape.gpus[PROM_IDLE].pods == ()
    assert scrape.time is not None  # /federate writes timestamps
    assert scrape.time.timestamp() == 1764583200.0


def test_exported_labels_win_label_by_label() -> None:
    # A Service-level job (NVIDIA/dcgm-exporter#363: kubernetes-service-endpoints) adds a
    # namespace target label but no pod: only namespace clashes and is renamed.
    line = (DATA / "rtx4000_k8s.prom").read_text().splitlines()[-1]
    renamed = line.replace('namespace="default"', 'exported_namespace="default"').replace(
        "pod_uid=", 'namespace="gpu-exporter",service="dcgm-gpu-exporter",pod_uid='
    )
    parsed = parse_exposition(renamed + "\n")
    assert isinstance(parsed, Scrape)
    assert parsed.gpus[RTX].pods == (
        PodRef(namespace="default", name="cuda-75454ffb9f-8ljq7", container="cuda"),
    )


def test_old_namespace_labels_through_prometheus_never_clash_but_reveal_the_exporter() -> None:
    # --use-old-namespace writes pod_name/pod_namespace: nothing to rename, so the target's
    # pod/namespace sit beside them on every series, including the idle instances'.
    text = (DATA / "a100_mig_old_namespace.prom").read_text()
    lines = [
        line.replace('pod_namespace=""}', 'pod_namespace="",namespace="monitoring",pod="dcgm-0"}')
        for line in text.splitlines()
    ]
    busy = (
        lines[3]
        .replace('pod_name=""', 'pod_name="a-0"')
        .replace('pod_namespace=""', 'pod_namespace="ml"')
    )
    # Prometheus drops empty labels: the idle instances keep only the target's pod.
    empty = 'container_name="",pod_name="",pod_namespace="",'
    idle = [line.replace(empty, "") for line in lines[4:]]
    parsed = parse_exposition("\n".join([busy, *idle]) + "\n")
    assert isinstance(parsed, Scrape)
    pods = {key: gpu.pods for key, gpu in parsed.gpus.items()}
    assert pods == {
        "GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167/GI1": (PodRef(namespace="ml", name="a-0"),),
        "GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167/GI2": (),
        "GPU-6043e4b2-feaa-8010-34c7-61d1a01576bb/GI1": (),
    }


# -- a timestamp that is not a time leaves its sample out, not the scrape --------------------
@pytest.mark.parametrize("stamp", ["1e999", "-1e999", "NaN", "+Inf", "-5", "99999999999999999"])
def test_a_sample_whose_timestamp_is_not_a_time_is_left_out_with_its_reason(stamp: str) -> None:
    text = (
        f'{XID_GAUGE}{{gpu="0",UUID="GPU-0"}} 79 {stamp}\n'
        f'{XID_GAUGE}{{gpu="1",UUID="GPU-1"}} 0 1700000000000\n'
    )
    scrape = parse_exposition(text)
    assert isinstance(scrape, Scrape), scrape
    assert list(scrape.gpus) == ["GPU-1"]  # GPU-0's only sample was left out
    assert scrape.time == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    (bad,) = scrape.bad
    assert bad.field == "timestamp"
    assert bad.reason.startswith("sample timestamp ")
    assert bad.series.startswith(f'{XID_GAUGE}{{gpu="0",UUID="GPU-0"}} 79')


def test_a_scrape_of_only_bad_timestamps_is_one_error_saying_so() -> None:
    result = parse_exposition(f'{XID_GAUGE}{{gpu="0",UUID="GPU-0"}} 0 1e999\n')
    assert isinstance(result, RecordError)
    assert "no usable GPU series (1 sample(s) left out; first: sample timestamp" in str(result)
