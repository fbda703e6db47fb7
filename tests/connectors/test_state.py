"""State files: when a source's position is written, and that a bad file is reported."""

from __future__ import annotations

from pathlib import Path

from connectors.state import StateFile, load_state
from connectors.xid.kmsg import KmsgState


def test_published_batches_are_saved_at_once_noise_at_most_every_interval(tmp_path: Path) -> None:
    now = [100.0]
    state = StateFile(
        tmp_path / "s" / "state.json", KmsgState, quiet_every_s=5.0, clock=lambda: now[0]
    )
    assert state.path.parent.is_dir(), "the directory exists from the start"
    state.save(KmsgState(boot_id="b", seq=1), published=False)
    assert load_state(state.path, KmsgState) is None, "noise alone: not yet"
    state.save(KmsgState(boot_id="b", seq=2), published=True)
    assert load_state(state.path, KmsgState) == KmsgState(boot_id="b", seq=2)
    now[0] += 4.9
    state.save(KmsgState(boot_id="b", seq=3), published=False)
    assert load_state(state.path, KmsgState) == KmsgState(boot_id="b", seq=2)
    now[0] += 0.2
    state.save(KmsgState(boot_id="b", seq=4), published=False)
    assert load_state(state.path, KmsgState) == KmsgState(boot_id="b", seq=4)


def test_an_undecodable_state_file_is_an_error_value_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    state = StateFile(path, KmsgState)
    assert state.load() is None
    assert state.error is not None
    assert "state file" in state.error.reason
