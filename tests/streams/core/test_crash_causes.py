"""A crash loop whose termination message names another cause is not CUDA OOM.

Every test that drives the engine builds real-shaped pod updates (tests/factories.py:
``restartCount`` rising, ``lastState.terminated`` with exit 1 and the message kubelet
keeps under ``FallbackToLogsOnError``), with messages copied in shape from the public
reports that ``schemas/termination_causes.toml`` cites. Before the fix every one of
these loops became ``suspected_cuda_oom`` at the container's own subject with
"reduce batch size or request a larger GPU".
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from schemas.ids import incident_id
from schemas.incidents import Incident
from schemas.termination_causes import load_causes, parse_causes
from tests.core_helpers import of_type, run
from tests.crash_loops import BUS, CRASHES, MIN, UUID, loop
from tests.factories import Cluster, term

KIND = "suspected_cuda_oom"

ECC = (
    'Traceback (most recent call last):\n  File "/app/train.py", line 88, in <module>\n'
    "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1."
)
ILLEGAL = (
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nCompile with `TORCH_USE_CUDA_DSA` to enable "
    "device-side assertions."
)
LAUNCH = (
    "RuntimeError: CUDA error: unspecified launch failure\n"
    "CUDA kernel errors might be asynchronously reported at some other API call,so the "
    "stacktrace below might be incorrect."
)
NVML = (
    '  File "/usr/lib/python3.12/site-packages/pynvml.py", line 1042, in _nvmlCheckReturn\n'
    "    raise NVMLError(ret)\npynvml.NVMLError_Unknown: Unknown Error"
)
SMI = "Failed to initialize NVML: Unknown Error"
WATCHDOG = (
    "[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, "
    "NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600061 milliseconds "
    "before timing out."
)
IB = (
    "terminate called after throwing an instance of 'std::runtime_error' what(): NCCL error: "
    "remote process exited or there was a network error, NCCL version 2.14.3 ncclRemoteError: "
    "A call failed possibly due to a network error or a remote process exiting prematurely. "
    "Last error: NET/IB : Got completion from peer 11.214.147.122<39138> with error 12, "
    "opcode 0, len 0, vendor err 129"
)
IB_NEW = (
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from "
    "peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
)
WATCHDOG_CUDA = (
    "[PG 1 Rank 1] Process group watchdog thread terminated with exception: CUDA error: an "
    "illegal memory access was encountered"
)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.10 GiB of which 1.02 GiB is free."
)

FAULT = "gpu_fault_crash_loop"
DEVICE_CAUSES = {"gpu_fault", "driver_fault"}
"""Causes whose loop is typed ``gpu_fault_crash_loop``, not ``suspected_cuda_oom``."""


def only(revisions: list[Incident]) -> Incident:
    [inc] = of_type(revisions, KIND) + of_type(revisions, FAULT)
    return inc


_SUBJECTS = ("ns/ft/main", *(f"ns/ft/main#{cls.name}" for cls in load_causes().classes))


def subject(inc: Incident, c: Cluster) -> str:
    """The subject the incident's id was derived from (subjects are not on the wire: the
    id is how a consumer tells two loops of one container apart)."""
    for candidate in _SUBJECTS:
        for ev in c.events:
            if incident_id(inc.type, c.name, "n3", candidate, ev.id) == inc.id:
                return candidate
    raise AssertionError(f"no subject derives {inc.id}")


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        (ECC, "gpu_fault"),
        (ILLEGAL, "kernel_fault"),
        (LAUNCH, "kernel_fault"),
        (NVML, "driver_fault"),
        (SMI, "driver_fault"),
        (WATCHDOG, "nccl_comm"),
        (IB, "nccl_comm"),
        (IB_NEW, "nccl_comm"),
    ],
    ids=[
        "ecc",
        "illegal-access",
        "launch-failure",
        "nvml",
        "nvidia-smi",
        "watchdog",
        "ib",
        "ib-new",
    ],
)
def test_a_named_cause_is_not_called_cuda_oom(message: str, cause: str) -> None:
    """Failed before: the loop was the container's ``suspected_cuda_oom`` with "reduce batch
    size", whatever the message said. Now it is its own finding, subject ``...#<cause>``,
    with the cause in the summary and the cause's action."""
    c = Cluster()
    loop(c, CRASHES, message)
    inc = only(run(c.events))
    assert subject(inc, c) == f"ns/ft/main#{cause}"
    assert inc.type == (FAULT if cause in DEVICE_CAUSES else KIND)
    assert inc.attributes["cause"] == cause
    assert inc.attributes["confidence"] == "log-named"
    assert inc.attributes["restarts_in_window"] == "4"
    assert "not CUDA OOM" in inc.summary
    assert "suspected CUDA OOM" not in inc.summary
    assert "batch size" not in inc.action or "do not shrink the batch" in inc.action
    assert "reduce batch size" not in inc.action
    assert inc.action == _action(cause) + (f" GPU: {UUID}." if _names_gpu(cause) else "")


def test_a_gpu_fault_names_the_gpu_the_pod_is_bound_to() -> None:
    """Failed before: the loop named no GPU (CUDA OOM is the workload's). An ECC error is
    the GPU's: the incident names it by UUID and bus id, so it can be drained."""
    c = Cluster()
    loop(c, CRASHES, ECC)
    inc = only(run(c.events))
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [(UUID, BUS)]
    assert UUID in inc.action


def test_a_network_cause_names_no_gpu() -> None:
    """Failed before (subject, action). An NCCL timeout is not the local GPU's fault: no
    GPU is named, even though the pod is bound to one."""
    c = Cluster()
    loop(c, CRASHES, WATCHDOG)
    inc = only(run(c.events))
    assert subject(inc, c).endswith("#nccl_comm")
    assert list(inc.gpus) == []


def test_matching_is_case_insensitive() -> None:
    """Failed before. Logs pass through wrappers that upper-case or re-case messages
    (Julia's ``ERROR:``, Go loggers); the table matches case-insensitively."""
    c = Cluster()
    loop(c, CRASHES, "FATAL: CUDA ERROR: UNCORRECTABLE ECC ERROR ENCOUNTERED")
    assert subject(only(run(c.events)), c) == "ns/ft/main#gpu_fault"


def test_the_watchdog_re_raising_a_cuda_error_is_the_cuda_error() -> None:
    """Failed before. PyTorch's NCCL watchdog re-raises the CUDA error that killed it: the
    cause is the kernel fault, not the network (precedence order, not leftmost match)."""
    c = Cluster()
    loop(c, CRASHES, WATCHDOG_CUDA)
    assert only(run(c.events)).attributes["cause"] == "kernel_fault"


def test_a_message_that_also_says_cuda_out_of_memory_stays_cuda_oom() -> None:
    """Regression guard (passed before too): an NCCL failure whose message also says
    ``CUDA out of memory`` is an OOM on this rank, the old subject and text."""
    c = Cluster()
    loop(c, CRASHES, WATCHDOG + "\n" + OOM)
    inc = only(run(c.events))
    assert subject(inc, c) == "ns/ft/main"
    assert inc.attributes["confidence"] == "log-confirmed"
    assert "cause" not in inc.attributes
    assert "reduce batch size" in inc.action


def test_no_message_is_still_suspected_cuda_oom() -> None:
    """Regression guard (passed before too): with no text the rule's guess stands."""
    c = Cluster()
    loop(c, CRASHES, "")
    inc = only(run(c.events))
    assert subject(inc, c) == "ns/ft/main"
    assert inc.attributes["confidence"] == "suspected"
    assert "suspected CUDA OOM" in inc.summary


def test_a_named_cause_supersedes_an_open_suspicion() -> None:
    """Failed before: the fifth crash's ECC text only joined the OOM suspicion as evidence.
    The text proves the guess wrong: the suspicion resolves, naming what superseded it,
    and the named loop opens (counting all five crashes of the window)."""
    c = Cluster()
    loop(c, CRASHES, "")
    loop(c, [11 * MIN], ECC, first=5)
    revisions = run(c.events)
    by_subject = {
        subject(inc, c): inc for inc in of_type(revisions, KIND) + of_type(revisions, FAULT)
    }
    assert set(by_subject) == {"ns/ft/main", "ns/ft/main#gpu_fault"}
    old = by_subject["ns/ft/main"]
    assert old.status == "resolved"
    assert "superseded" in old.attributes["resolution"]
    assert "ECC" in old.attributes["resolution"]
    new = by_subject["ns/ft/main#gpu_fault"]
    assert new.status != "resolved"
    assert new.attributes["restarts_in_window"] == "5"


def test_a_later_crash_without_text_keeps_the_named_cause() -> None:
    """Failed before (no named loop existed). A message cut short (or an empty one) on a
    later crash does not un-name the cause: the crash joins the named loop and no OOM
    suspicion opens beside it."""
    c = Cluster()
    loop(c, CRASHES, NVML)
    loop(c, [11 * MIN, 13 * MIN], "", first=5)
    inc = only(run(c.events))
    assert subject(inc, c) == "ns/ft/main#driver_fault"
    assert inc.attributes["restarts_in_window"] == "6"


def test_an_oomkill_supersedes_a_named_loop_too() -> None:
    """Failed before (no named loop existed). An OOMKilled last termination is host memory:
    the crash loop, whatever its named cause, resolves as with the OOM suspicion."""
    c = Cluster()
    loop(c, CRASHES, WATCHDOG)
    c.pod("n3", "ft", 12 * MIN, restarts=5, last=term(12 * MIN - 2, "OOMKilled", 137))
    revisions = run(c.events)
    inc = only(revisions)
    assert subject(inc, c).endswith("#nccl_comm")
    assert inc.status == "resolved"
    assert "OOMKilled" in inc.attributes["resolution"]


def test_ids_are_deterministic_and_distinct_per_cause() -> None:
    """Failed before (one id for every cause). The same input gives the same ids; a
    named loop's id never equals the OOM suspicion's for the same container."""

    def ids(message: str) -> list[str]:
        c = Cluster()
        loop(c, CRASHES, message)
        return [inc.id for inc in of_type(run(c.events), KIND)]

    assert ids(ECC) == ids(ECC)
    assert ids(ECC) != ids("")
    assert ids(ECC) != ids(WATCHDOG)


def test_three_named_crashes_are_not_a_loop() -> None:
    """Regression guard: the threshold is the rule's, whatever the cause."""
    c = Cluster()
    loop(c, CRASHES[:3], ECC)
    assert of_type(run(c.events), KIND) == []


# -- the table -----------------------------------------------------------------------------
def _raw() -> dict[str, object]:
    text = resources.files("schemas").joinpath("termination_causes.toml").read_text("utf-8")
    return tomllib.loads(text)


def _action(cause: str) -> str:
    cls = load_causes().get(cause)
    assert cls is not None
    return cls.action


def _names_gpu(cause: str) -> bool:
    cls = load_causes().get(cause)
    assert cls is not None
    return cls.names_gpu


def test_every_pattern_has_a_source_url_and_compiles() -> None:
    """Each text in the table must say where it was seen and be a valid regular expression
    (the raw TOML is checked, not only what the loader kept)."""
    patterns = _raw()["pattern"]
    assert isinstance(patterns, list)
    assert patterns
    for entry in patterns:
        assert isinstance(entry, dict)
        assert re.fullmatch(r"https://\S+", entry["source"]), entry
        re.compile(entry["regex"], re.IGNORECASE)
        assert not entry["regex"].startswith(".*"), entry


def test_every_class_has_an_action_and_a_place_in_precedence() -> None:
    """OOM must be tried first (an OOM text wins) and NCCL last (the watchdog re-raises
    the CUDA error); no other cause may carry the OOM advice."""
    table = load_causes()
    names = [cls.name for cls in table.classes]
    assert names[0] == "cuda_oom"
    assert names[-1] == "nccl_comm"
    assert {p.cause for p in table.patterns} <= set(names)
    for cls in table.classes:
        assert cls.label
        assert cls.action
        if cls.name != "cuda_oom":
            assert "reduce batch size" not in cls.action


def test_a_pattern_without_a_source_is_refused() -> None:
    """The loader enforces the sourcing rule too, so a site's override cannot skip it."""
    text = """
precedence = ["cuda_oom"]
[class.cuda_oom]
label = "x"
action = "y"
[[pattern]]
class = "cuda_oom"
regex = "out of memory"
source = "somewhere"
"""
    with pytest.raises(ValueError, match="no source URL"):
        parse_causes(text)


def test_a_class_missing_from_precedence_is_refused() -> None:
    """A class with no place in precedence would never be tried: refused, not ignored."""
    text = """
precedence = ["cuda_oom"]
[class.cuda_oom]
label = "x"
action = "y"
[class.gpu_fault]
label = "x"
action = "y"
"""
    with pytest.raises(ValueError, match="precedence"):
        parse_causes(text)


def test_the_table_is_packaged() -> None:
    """pyproject's package-data for ``schemas`` takes ``*.toml``: the table ships."""
    assert resources.files("schemas").joinpath("termination_causes.toml").is_file()


def test_a_workload_error_inside_a_log_confirmed_oom_loop_is_that_loops_crash() -> None:
    """A container's log proved its loop CUDA OOM (four "CUDA out of memory" exits in
    five minutes); its next exits say an NCCL watchdog timeout, then an illegal memory
    access: the workload's and the network's words, typical of a rank dying in an OOM
    loop. One loop, one incident: they are crashes of the open OOM ticket, not a second
    ticket first seen at the same crash (seen in a simulated fleet: four such pairs). A device's
    own words (an uncorrectable ECC error) still open their own: they call for the GPU."""
    c = Cluster()
    loop(c, [MIN, 2 * MIN, 3 * MIN, 4 * MIN], OOM)
    loop(c, [5 * MIN], WATCHDOG, first=5)
    loop(c, [6 * MIN], ILLEGAL, first=6)
    c.tick(8 * MIN)
    ticket = only(run(list(c.events)))
    assert ticket.attributes["confidence"] == "log-confirmed"
    assert "cause" not in ticket.attributes
    assert ticket.attributes["restarts_in_window"] == "6"
    loop(c, [7 * MIN], ECC, first=7)
    c.tick(9 * MIN)
    revisions = run(c.events)
    causes = sorted(
        (i.type, i.attributes.get("cause", ""))
        for i in of_type(revisions, KIND) + of_type(revisions, FAULT)
    )
    assert causes == [(FAULT, "gpu_fault"), (KIND, "")]
