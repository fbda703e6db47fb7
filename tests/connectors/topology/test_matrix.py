"""``nvidia-smi topo -m`` / ``-mp`` parsing on real public outputs (``samples/``: each file
names its source URL and GPU model in its header lines), and on arbitrary text."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from connectors.topology.events import topology_event
from connectors.topology.matrix import Topology, nvlinks_of, parse_topology
from schemas.codec import RecordError, decode_event
from schemas.events import GpuNumaAffinity, GpuPairLink, GpuTopologyEvent
from tests.cli_helpers import gputriage

SAMPLES = Path(__file__).parent / "samples"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def parsed(name: str) -> Topology:
    topology = parse_topology((SAMPLES / name).read_text())
    assert isinstance(topology, Topology), topology
    return topology


def cells(topology: Topology) -> dict[tuple[int, int], str]:
    return {(x.src_gpu, x.dst_gpu): x.link_type for x in topology.links}


def affinity(topology: Topology) -> list[tuple[int, int | None, str]]:
    return [(g.gpu, g.numa_node, g.cpu_affinity) for g in topology.gpus]


def test_every_sample_but_the_truncated_one_parses_with_each_pair_once() -> None:
    names = sorted(p.name for p in SAMPLES.glob("*.txt"))
    assert len(names) >= 5
    for name in names:
        if name == "mp_nics_truncated.txt":
            continue
        topology = parsed(name)
        n = len(topology.gpus)
        assert [g.gpu for g in topology.gpus] == list(range(n)), name
        assert [(x.src_gpu, x.dst_gpu) for x in topology.links] == [
            (a, b) for a in range(n) for b in range(a + 1, n)
        ], name


def test_hgx_h100_is_nv18_between_every_pair_with_two_numa_nodes() -> None:
    topology = parsed("h100_hgx_nv18.txt")
    assert len(topology.links) == 28
    assert {(x.link_type, x.nvlinks) for x in topology.links} == {("NV18", 18)}
    assert affinity(topology)[0] == (0, 0, "0-47,96-143")
    assert affinity(topology)[7] == (7, 1, "48-95,144-191")
    assert topology.nics == ()


def test_nic_columns_and_rows_are_read_past() -> None:
    topology = parsed("h100_nv18_nics.txt")
    assert topology.nics == tuple(f"NIC{i}" for i in range(9))
    assert {x.link_type for x in topology.links} == {"NV18"}
    assert affinity(topology)[3] == (3, 0, "0-79")
    assert affinity(topology)[4] == (4, 1, "80-159"), "the empty tab cell after NUMA is no value"


def test_a_pcie_only_box_is_sys_everywhere_and_numa_split() -> None:
    topology = parsed("rtx4090_pcie_sys_nics.txt")
    assert {x.link_type for x in topology.links} == {"SYS"}
    assert {x.nvlinks for x in topology.links} == {0}
    assert affinity(topology)[0] == (0, 0, "0-55,112-167")
    assert affinity(topology)[6] == (6, 1, "56-111,168-223"), "GPU6's PHB NIC cells are no pairs"
    assert topology.nics == ("NIC0", "NIC1")


def test_nvlink_bridged_pairs_and_an_empty_cpu_affinity_cell() -> None:
    """A100 PCIe with NVLink bridges: NV12 within pairs, NODE across; Slurm left GPU4-7's
    CPU Affinity empty, so their NUMA value must not be taken for a CPU list."""
    topology = parsed("a100_pcie_nv12_pairs.txt")
    link = cells(topology)
    assert [pair for pair, code in link.items() if code == "NV12"] == [
        (0, 1),
        (2, 3),
        (4, 5),
        (6, 7),
    ]
    assert link[1, 2] == link[0, 7] == link[5, 6] == "NODE"
    assert affinity(topology)[0] == (0, 0, "0-15,56-71")
    assert affinity(topology)[4:] == [(4, 1, ""), (5, 1, ""), (6, 1, ""), (7, 1, "")]
    assert topology.nics == ("NIC0",)


def test_one_phb_pair_with_the_legend_after_it() -> None:
    topology = parsed("rtx5090_pcie_phb.txt")
    assert topology.links == (GpuPairLink(src_gpu=0, dst_gpu=1, link_type="PHB", nvlinks=0),)
    assert topology.gpus == (
        GpuNumaAffinity(gpu=0, numa_node=0, cpu_affinity="0-63"),
        GpuNumaAffinity(gpu=1, numa_node=0, cpu_affinity="0-63"),
    )


def test_an_older_driver_prints_cpu_affinity_only() -> None:
    topology = parsed("t4_pcie_sys_node.txt")
    link = cells(topology)
    assert (link[0, 1], link[0, 3], link[1, 2], link[2, 3]) == ("SYS", "SYS", "NODE", "NODE")
    assert affinity(topology) == [
        (0, None, "0-15,32-47"),
        (1, None, "16-31,48-63"),
        (2, None, "16-31,48-63"),
        (3, None, "16-31,48-63"),
    ]


def test_dgx1_glued_header_soc_and_mlx5_rows() -> None:
    """The DGX-1 hybrid cube mesh: each GPU has NV1 to four peers and SOC (old SYS) to three."""
    topology = parsed("dgx1_soc_nv1_glued_header.txt")
    assert topology.nics == ("mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3")
    link = cells(topology)
    assert (link[0, 1], link[0, 4], link[0, 5], link[1, 5], link[3, 7], link[4, 7]) == (
        "NV1",
        "NV1",
        "SOC",
        "NV1",
        "NV1",
        "NV1",
    )
    for gpu in range(8):
        peers = [x for x in topology.links if gpu in (x.src_gpu, x.dst_gpu)]
        assert sum(1 for x in peers if x.nvlinks == 1) == 4, gpu
        assert sum(1 for x in peers if x.link_type == "SOC") == 3, gpu
    assert affinity(topology)[5] == (5, None, "1-1")


def test_a_reindented_paste_with_a_p2p_matrix_after_it() -> None:
    topology = parsed("consumer_reindented_node.txt")
    assert cells(topology) == {(0, 1): "NODE"}
    assert affinity(topology) == [(0, 0, "0-15"), (1, 0, "0-15")]


def test_a_truncated_mp_output_is_a_reason_not_a_partial_topology() -> None:
    result = parse_topology((SAMPLES / "mp_nics_truncated.txt").read_text())
    assert isinstance(result, RecordError)
    assert result.reason.startswith("GPU4: expected 22 link codes")
    assert result.field == "line 10"


def test_errors_name_what_is_missing() -> None:
    missing = parse_topology("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n")
    assert isinstance(missing, RecordError)
    assert "names GPU1 but no row" in missing.reason
    not_self = parse_topology(
        "\tGPU0\tGPU1\tCPU Affinity\nGPU0\tNV4\tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"
    )
    assert isinstance(not_self, RecordError)
    assert "own column reads 'NV4'" in not_self.reason
    assert isinstance(parse_topology("No devices were found\n"), RecordError)


def test_a_single_gpu_has_no_pairs_and_crlf_and_colour_are_read() -> None:
    one = parse_topology(
        "\x1b[1m\tGPU0\tCPU Affinity\tNUMA Affinity\x1b[0m\r\nGPU0\t X \t0-31\tN/A\r\n"
    )
    assert one == Topology(
        gpus=(GpuNumaAffinity(gpu=0, numa_node=None, cpu_affinity="0-31"),), links=()
    )


def test_nvlink_counts() -> None:
    assert (nvlinks_of("NV18"), nvlinks_of("NV1"), nvlinks_of("SYS"), nvlinks_of("X")) == (
        18,
        1,
        0,
        0,
    )


@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    assert isinstance(parse_topology(text), Topology | RecordError)


_TOKENS = st.sampled_from(
    [
        "GPU0",
        "GPU1",
        "GPU12",
        "NIC0",
        "mlx5_0",
        " X ",
        "NV18",
        "SYS",
        "N/A",
        "0-7",
        "CPU Affinity",
        "NUMA Affinity",
        "GPU NUMA ID",
        "Legend:",
        "\t",
        "\n",
        " ",
        "",
        "GPU0GPU1",
    ]
)


@given(st.lists(_TOKENS, max_size=80))
def test_matrix_like_text_never_raises(tokens: list[str]) -> None:
    assert isinstance(parse_topology("".join(tokens)), Topology | RecordError)


def test_the_record_is_a_snapshot_with_a_content_id() -> None:
    topology = parsed("a100_pcie_nv12_pairs.txt")
    event = topology_event(topology, cluster="c1", node="n1", time=T0, source="nvidia-smi")
    assert decode_event(msgspec.json.encode(event)) == event
    later = topology_event(
        topology, cluster="c1", node="n1", time=T0.replace(hour=10), source="nvidia-smi"
    )
    assert later.id == event.id, "the same topology, read again, has the same id"
    broken = Topology(
        gpus=topology.gpus,
        links=tuple(
            msgspec.structs.replace(x, link_type="NODE", nvlinks=0)
            if (x.src_gpu, x.dst_gpu) == (0, 1)
            else x
            for x in topology.links
        ),
    )
    changed = topology_event(broken, cluster="c1", node="n1", time=T0, source="nvidia-smi")
    assert changed.id != event.id
    elsewhere = topology_event(topology, cluster="c1", node="n2", time=T0, source="nvidia-smi")
    assert elsewhere.id != event.id


def test_the_cli_prints_one_record_and_reports_a_bad_file_in_one_line() -> None:
    sample = SAMPLES / "h100_hgx_nv18.txt"
    proc = gputriage(
        "ingest",
        "topo",
        "--node",
        "n1",
        "--cluster",
        "c1",
        "--file",
        str(sample),
        "--time",
        "2026-11-30T09:00:00Z",
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    event = decode_event(line)
    assert isinstance(event, GpuTopologyEvent)
    assert (event.node, event.cluster, event.time, event.source) == ("n1", "c1", T0, "nvidia-smi")
    assert len(event.links) == 28
    assert event.links[0].link_type == "NV18"
    again = gputriage("ingest", "topo", "--node", "n1", "--cluster", "c1", "--file", str(sample))
    assert decode_event(again.stdout).id == event.id, "the id does not depend on the time"
    bad = gputriage(
        "ingest", "topo", "--node", "n1", "--file", str(SAMPLES / "mp_nics_truncated.txt")
    )
    assert bad.returncode == 1
    assert bad.stdout == b""
    stderr = bad.stderr.decode()
    assert stderr.count("\n") == 1
    assert "GPU4: expected 22 link codes" in stderr


def test_the_cli_reads_stdin() -> None:
    text = (SAMPLES / "rtx5090_pcie_phb.txt").read_bytes()
    proc = gputriage("ingest", "topo", "--node", "n1", "--file", "-", stdin=text)
    assert proc.returncode == 0, proc.stderr
    event = decode_event(proc.stdout)
    assert isinstance(event, GpuTopologyEvent)
    assert [x.link_type for x in event.links] == ["PHB"]
