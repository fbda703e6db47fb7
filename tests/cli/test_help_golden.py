"""Every command's ``--help``, pinned byte for byte in ``tests/cli/golden/help/``.

The options users see change only on purpose: a difference from the golden file fails with a
unified diff, and when the change is meant, ``make golden`` rewrites the files (it runs
``GPUTRIAGE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/cli/test_help_golden.py``) and
the diff is reviewed in the commit. One file per command, named by its path
(``gputriage-connect-k8s.txt``).

The command tree is walked, not listed: a new command or subcommand fails here until its
golden file is written, and a golden file whose command is gone fails as stale.

Traps: click wraps help to the terminal (``$COLUMNS``, else the tty, capped by the
commands' ``max_content_width``, less a 2-column margin), but its test runner ignores both
and wraps at 80 unless given a width; and an option's ``envvar`` or a settings variable
could leak the developer's environment into the text. The files are rendered at the width
a terminal of ``max_content_width`` columns or more gets (one test checks that against the
console script itself), with every ``GPUTRIAGE_*`` variable and every variable an option
reads removed, so neither the terminal nor the environment changes a byte.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import click
import pytest
from click.testing import CliRunner

from gputriage.cli import cli
from gputriage.errors import PROG
from gputriage.settings import ENV_PREFIX
from tests.cli_helpers import clean_env
from tests.paths import ROOT

UPDATE_ENV: Final = "GPUTRIAGE_UPDATE_GOLDEN"
"""Set to 1 to (re)write the golden files instead of comparing with them."""
GOLDEN: Final = Path(__file__).resolve().parent / "golden" / "help"
REGENERATE: Final = (
    f"make golden  (or: {UPDATE_ENV}=1 .venv/bin/python -m pytest "
    f"{Path(__file__).resolve().relative_to(ROOT)})"
)
WIDTH: Final[int] = cli.context_settings["max_content_width"] - 2
"""What click wraps at on a wide terminal: the commands' cap less its 2-column margin."""


def _walk(
    command: click.Command, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``command`` (itself first) with its path, in click's order."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            assert child is not None, f"{' '.join(path)} lists {name!r} but has no such command"
            yield from _walk(child, (*path, name))


TREE: Final = tuple(_walk(cli, (PROG,)))
COMMANDS: Final = tuple(path for path, _ in TREE)
ENVVARS: Final = frozenset(
    name
    for _, command in TREE
    for param in command.params
    for name in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or ())
)
"""The environment variables an option reads (``--node``: ``$NODE_NAME``)."""


def _golden(path: tuple[str, ...]) -> Path:
    return GOLDEN / f"{'-'.join(path)}.txt"


def _render(path: tuple[str, ...]) -> str:
    """``<path> --help`` as the console script prints it, in a pinned environment."""
    unset = {name for name in os.environ if name.startswith(ENV_PREFIX)} | ENVVARS
    runner = CliRunner(env=dict.fromkeys(unset))
    result = runner.invoke(cli, [*path[1:], "--help"], prog_name=PROG, terminal_width=WIDTH)
    if result.exit_code != 0 or result.stderr:
        pytest.fail(
            f"{' '.join(path)} --help: exit {result.exit_code}, stderr {result.stderr!r}",
            pytrace=False,
        )
    return result.stdout


def _updating() -> bool:
    return os.environ.get(UPDATE_ENV, "") not in ("", "0")


@pytest.mark.parametrize("path", COMMANDS, ids=["-".join(p) for p in COMMANDS])
def test_help_matches_its_golden_file(path: tuple[str, ...]) -> None:
    """The help a user sees is the reviewed one, to the byte."""
    rendered = _render(path)
    golden = _golden(path)
    if _updating():
        if not golden.exists() or golden.read_text(encoding="utf-8") != rendered:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(rendered, encoding="utf-8")
        return
    expected = golden.read_text(encoding="utf-8") if golden.exists() else None
    if expected == rendered:
        return
    name = golden.relative_to(ROOT)
    diff = "".join(
        difflib.unified_diff(
            (expected or "").splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            fromfile=str(name) if expected is not None else "/dev/null",
            tofile=f"{' '.join(path)} --help",
        )
    )
    what = "differs from" if expected is not None else "has no golden file"
    pytest.fail(
        f"{' '.join(path)} --help {what} {name}:\n{diff}\n"
        f"If the change is meant, regenerate and review: {REGENERATE}",
        pytrace=False,
    )


def test_no_golden_file_for_a_command_that_is_gone() -> None:
    """A golden file no command renders pins nothing: a renamed command leaves one behind."""
    expected = {_golden(path).name for path in COMMANDS}
    stale = sorted(p for p in GOLDEN.glob("*.txt") if p.name not in expected)
    if stale and _updating():
        for path in stale:
            path.unlink()
        return
    assert not stale, (
        f"golden files for no command: {', '.join(p.name for p in stale)}; "
        f"remove them with: {REGENERATE}"
    )


def test_the_walk_reaches_every_subcommand_and_names_each_file_once() -> None:
    """Every command a group holds is walked, down to subcommands of subcommands, and no
    two command paths share a golden file (``a b-c`` and ``a-b c`` would)."""
    for path, command in TREE:
        if isinstance(command, click.Group):
            missing = [name for name in command.commands if (*path, name) not in COMMANDS]
            assert not missing, f"{' '.join(path)}: {missing} not walked"
    assert any(len(path) > 2 for path in COMMANDS)
    assert len({_golden(path) for path in COMMANDS}) == len(COMMANDS)


@pytest.mark.parametrize("path", [COMMANDS[0], max(COMMANDS, key=len)], ids="-".join)
def test_the_runner_prints_what_the_console_script_prints(path: tuple[str, ...]) -> None:
    """The runner's width is a wide terminal's: ``python -m gputriage`` prints the same bytes."""
    done = subprocess.run(
        [sys.executable, "-m", PROG, *path[1:], "--help"],
        env=clean_env({"COLUMNS": str(2 * WIDTH)}),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == _render(path)
