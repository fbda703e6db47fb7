"""Shared fixtures: one real Kafka-protocol broker per test session, unique topics per test.

The broker is the embedded Tansu (:class:`gputriage.demo.broker.EmbeddedBroker`),
started lazily by the first test that asks for it (~50 ms) and stopped at the
end of the session. Tests share it, so each one gets its own topic prefix from
:func:`kafka`: no test sees another's records, and none has to clean up.

Here too the ``e2e`` and ``slow`` marks (:func:`pytest_collection_modifyitems`), which
``make check`` leaves out: ``make test`` runs everything.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import CodeType, ModuleType

import hypothesis
import pytest

from gputriage.demo.broker import EmbeddedBroker
from tests.kafka_helpers import KafkaTestEnv


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> object:
    """Keep looptime's plugin from leaking an event loop in every sync test.

    looptime 0.9 asks ``policy.get_event_loop()`` before each test, sync ones too, to
    find the test's loop; on Python 3.11, in the main thread with no loop set, that
    *creates* one, sets it current and never closes it. The next ``asyncio.run``
    unsets it and the garbage collector reports "unclosed event loop" (and its two
    self-pipe sockets) during whatever test runs then. Marking "no loop" explicitly
    makes that call raise RuntimeError instead, which looptime takes as "not mine".
    """
    if pyfuncitem.get_closest_marker("asyncio") is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the policy API, 3.12+
            policy = asyncio.get_event_loop_policy()
        if getattr(getattr(policy, "_local", None), "_loop", None) is None:
            policy.set_event_loop(None)
    return (yield)


SPAWNING_NAMES = frozenset(
    {"Popen", "check_output", "check_call", "create_subprocess_exec", "create_subprocess_shell"}
)
"""Names whose use starts a process (``subprocess.run`` is told by its module's name too)."""
E2E_DIR = Path(__file__).parent / "e2e"
SLOW: frozenset[str] = frozenset(
    {
        "tests/cli/test_logs.py::test_a_30_s_outage_at_aiokafkas_pace_is_a_few_lines",
        "tests/connectors/autoscaler/test_status.py::test_a_status_nested_ten_thousand_deep_is_a_record_error",
        "tests/connectors/k8s/test_leader.py::test_one_leader_and_the_other_takes_over_when_it_releases",
        "tests/schemas/test_router.py::test_the_routers_memory_forgets_objects_not_seen_for_two_refresh_periods",
        "tests/streams/core/test_differential.py::test_copies_only_on_change_give_what_every_copy_gives",
        "tests/streams/core/test_differential.py::test_node_churn_no_cluster_rule_reads_costs_the_cluster_key_no_copy",
        "tests/streams/core/test_differential.py::test_the_shortcuts_change_no_incident_and_no_state",
        "tests/streams/core/test_gpuids.py::test_pack_uuid_takes_what_the_expression_took_and_nothing_else",
        "tests/streams/core/test_starved_memo.py::test_memo_changes_no_revision",
        "tests/test_docstrings.py::test_every_docstring_sits_under_an_object",
    }
)
"""Tests (path::name, parameters dropped) that took over a second on 2 shared cores (a
``--durations`` run of the whole suite) and are neither e2e nor property-based."""
FIRST: frozenset[str] = frozenset({"tests/streams/app/test_kills.py"})
"""Files whose tests run first: the longest of the suite (the kill tests, about 220 s of
one worker on 2 shared cores). ``--dist worksteal`` first splits the collection into equal
runs, one a worker, and idle workers steal from the others' queues: a long test at the head
of one run starts at once and the rest of that run is stolen, where one deep in a run
started late and ended the whole suite after the others (measured: ~40 s of tail)."""

Uses = Callable[[set[str], Mapping[str, object]], bool]
"""Whether code naming ``used`` (its globals and attributes) with ``names`` as its globals
does the thing looked for."""


def _starts_a_process(used: set[str], names: Mapping[str, object]) -> bool:
    """A subprocess (Alertmanager, promtool, kustomize, the CLI) or the embedded broker."""
    if used & SPAWNING_NAMES or "EmbeddedBroker" in used:  # the broker is a process too
        return True
    return "subprocess" in used and bool(used & {"run", "call"})


def _runs_examples(used: set[str], names: Mapping[str, object]) -> bool:
    """Property-based inside (an ``@given`` test built in the test's body): hypothesis runs
    it on a hundred examples or more."""
    return "given" in used and names.get("given") is hypothesis.given


def _code_does(
    code: CodeType, names: Mapping[str, object], does: Uses, seen: set[CodeType]
) -> bool:
    """Whether ``code``, its nested code, or a function or class of tests/ it names (through
    its globals and the attributes of modules of tests/) ``does``."""
    if code in seen:
        return False
    seen.add(code)
    used = set(code.co_names)
    if does(used, names):
        return True
    for name in used:
        found = names.get(name)
        if isinstance(found, ModuleType):
            ours = found.__name__.startswith("tests")
            if ours and any(_does(getattr(found, a, None), does, seen) for a in used):
                return True
        elif _does(found, does, seen):
            return True
    nested = (c for c in code.co_consts if isinstance(c, CodeType))
    return any(_code_does(c, names, does, seen) for c in nested)


def _does(obj: object, does: Uses, seen: set[CodeType]) -> bool:
    """A function (cached or wrapped ones too) or class of tests/ whose code ``does``."""
    if obj is None or not str(getattr(obj, "__module__", "")).startswith("tests"):
        return False
    if inspect.isclass(obj):
        own = [k for k in obj.__mro__ if k.__module__.startswith("tests")]
        members = [getattr(m, "__func__", m) for k in own for m in vars(k).values()]
        return any(_does(m, does, seen) for m in members if callable(m))
    function = inspect.unwrap(obj) if callable(obj) else obj
    if not inspect.isfunction(function):
        return False
    return _code_does(function.__code__, function.__globals__, does, seen)


def _item_does(item: pytest.Item, does: Uses) -> bool:
    """The test's function or one of its fixtures' ``does``."""
    seen: set[CodeType] = set()
    if _does(getattr(item, "function", None), does, seen):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(_does(d.func, does, seen) for fixtures in defs for d in fixtures)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``e2e`` (pyproject.toml): under tests/e2e, or the test or a fixture of it starts a
    process (the broker, Alertmanager, promtool, kustomize, the CLI), found by following its
    code. Mark ``slow``: property-based tests, and :data:`SLOW`. ``make check`` runs neither.

    Trap: the code is followed through names, not run: a process started through a name
    that is not a function or class of tests/ (a callable kept in a dict, a third-party
    helper) is not seen; mark such a test ``@pytest.mark.e2e`` by hand."""
    root = Path(__file__).parent.parent
    for item in items:
        if E2E_DIR in Path(item.path).parents or _item_does(item, _starts_a_process):
            item.add_marker(pytest.mark.e2e)
        name = f"{Path(item.path).relative_to(root)}::{item.name.split('[')[0]}"
        given = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
        if name in SLOW or given or _item_does(item, _runs_examples):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: str(Path(item.path).relative_to(root)) not in FIRST)


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker for the whole session (memory storage, loopback port)."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def kafka(broker: EmbeddedBroker) -> KafkaTestEnv:
    """The session broker with a topic prefix of this test's own (topics not created yet)."""
    return KafkaTestEnv(broker=broker, prefix=f"t{uuid.uuid4().hex[:10]}")
