"""State files: when a source's position is written, and that a bad file is reported."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from connectors.state import StateError, StateFile, StateInUse, load_state, save_state
from connectors.xid.kmsg import KmsgState


def test_published_batches_are_saved_at_once_noise_at_most_every_interval(tmp_path: Path) -> None:
    now = [100.0]
    state = StateFile(
        tmp_path / "s" / "state.json", KmsgState, quiet_every_seconds=5.0, clock=lambda: now[0]
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


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_the_quiet_interval_runs_on_the_loops_clock_by_default(tmp_path: Path) -> None:
    """No clock given: the publish loop's (fake, under looptime) clock measures the
    interval, so a quiet stream's position is saved after 5 s of the loop's time."""
    state = StateFile(tmp_path / "state.json", KmsgState)
    state.save(KmsgState(boot_id="b", seq=1), published=False)
    assert load_state(state.path, KmsgState) is None
    await asyncio.sleep(5.0)
    state.save(KmsgState(boot_id="b", seq=2), published=False)
    assert load_state(state.path, KmsgState) == KmsgState(boot_id="b", seq=2)


def test_an_undecodable_state_file_is_an_error_value_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    state = StateFile(path, KmsgState)
    assert state.load() is None
    assert state.error is not None
    assert "state file" in state.error.reason


def test_concurrent_writers_never_break_each_others_save(tmp_path: Path) -> None:
    """With a fixed temporary name two writers truncated and renamed each
    other's file (759 of 2,000 saves failed with FileNotFoundError). Unique names:
    every save succeeds, and the file always holds one whole state."""
    path = tmp_path / "state.json"
    errors: list[BaseException] = []

    def writer(boot: str) -> None:
        try:
            for seq in range(300):
                save_state(path, KmsgState(boot_id=boot, seq=seq))
        except BaseException as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    final = load_state(path, KmsgState)
    assert final is not None
    assert final.seq == 299
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_symlink_planted_at_the_old_temporary_name_is_never_written_through(
    tmp_path: Path,
) -> None:
    """The old writer opened ``.NAME.tmp`` for writing, following a symlink an attacker
    planted there onto any file the reader could write. Now the temporary name is
    unpredictable and created exclusively; the planted link's target is untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / ".state.json.tmp").symlink_to(victim)
    save_state(tmp_path / "state.json", KmsgState(boot_id="b", seq=1))
    assert victim.read_text() == "precious"
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600


def test_a_second_writer_of_the_same_state_file_is_refused_in_one_line(tmp_path: Path) -> None:
    """Two readers with one state file would move each other's position back and forth
    (and one of them re-publish what the other acknowledged). The second is refused,
    naming the file and the holder; once the first closes, the file is free again."""
    path = tmp_path / "state.json"
    first = StateFile(path, KmsgState)
    with pytest.raises(StateInUse) as refused:
        StateFile(path, KmsgState)
    message = str(refused.value)
    assert "\n" not in message
    assert str(path) in message
    assert f"pid {os.getpid()}" in message
    first.close()
    second = StateFile(path, KmsgState)
    second.close()


def test_a_symlink_at_the_lock_name_is_refused_not_followed(tmp_path: Path) -> None:
    """The lock file is opened with O_NOFOLLOW: a link planted there is an error, not a
    way to truncate another file."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "state.json.lock").symlink_to(victim)
    with pytest.raises(StateError, match=r"state\.json\.lock: Too many levels of symbolic"):
        StateFile(tmp_path / "state.json", KmsgState)
    assert victim.read_text() == "precious"


# -- a state file that cannot be used: StateError, one line naming the file ---------------
def test_a_parent_that_is_a_file_is_said_to_be_one(tmp_path: Path) -> None:
    # mkdir's own word for it is "File exists", which reads as if all were well.
    (tmp_path / "a-file").write_text("")
    with pytest.raises(StateError) as refused:
        StateFile(tmp_path / "a-file" / "state.json", KmsgState)
    assert str(refused.value) == (
        f"cannot use state file {tmp_path}/a-file/state.json: {tmp_path}/a-file is not a directory"
    )


def test_a_directory_that_takes_no_files_names_the_lock_and_the_reason() -> None:
    with pytest.raises(StateError) as refused:
        StateFile("/proc/gputriage-state.json", KmsgState)
    assert str(refused.value) == (
        "cannot use state file /proc/gputriage-state.json: "
        "/proc/gputriage-state.json.lock: No such file or directory"
    )


def test_a_state_file_that_cannot_be_read_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").mkdir()
    with pytest.raises(StateError, match=r"cannot read state file .*state\.json: Is a directory"):
        load_state(tmp_path / "state.json", KmsgState)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    with pytest.raises(StateError, match=r"cannot read state file .*zero: larger than 16 MiB$"):
        StateFile(zero, KmsgState).load()


def test_a_full_disk_at_save_is_a_state_error_and_the_old_state_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = StateFile(tmp_path / "state.json", KmsgState)
    state.save(KmsgState(boot_id="b", seq=1), published=True)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # where a full disk (or NFS) says so at last
    with pytest.raises(StateError) as refused:
        state.save(KmsgState(boot_id="b", seq=2), published=True)
    monkeypatch.undo()
    assert str(refused.value) == (
        f"cannot save state file {tmp_path}/state.json: No space left on device"
    )
    assert load_state(state.path, KmsgState) == KmsgState(boot_id="b", seq=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.lock"]
    state.close()
