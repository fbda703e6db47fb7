"""``gputriage schemas``: write or check the JSON Schema documents of every topic."""

from __future__ import annotations

from pathlib import Path

import click

from gputriage.cli.common import CONTEXT
from gputriage.errors import FAILED, PROG, error, os_error_text
from schemas.jsonschema import DOCUMENT_DIR, drifted_documents, write_documents


@click.command("schemas", context_settings=CONTEXT)
@click.option("--write", "mode", flag_value="write", help="(Re)generate the documents.")
@click.option("--check", "mode", flag_value="check", help="Exit 1 if any document has drifted.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DOCUMENT_DIR,
    show_default="the package's schemas/jsonschema",
    help="Where the documents live.",
)
def schemas_command(mode: str | None, directory: Path) -> int:
    """Write or check the JSON Schema documents generated from the record types.

    \b
    Examples:
      gputriage schemas --check
      gputriage schemas --write --dir docs/jsonschema
    """
    if mode is None:
        raise click.UsageError("choose --write or --check")
    return run_schemas(mode == "write", directory)


def run_schemas(write: bool, directory: Path) -> int:
    """Write the documents (0), or check them: 1 and one line per drifted document."""
    if write:
        try:
            written = write_documents(directory)
        except OSError as exc:  # --dir /proc, a read-only or full file system
            same = exc.filename is not None and Path(exc.filename) == directory
            reason = exc.strerror if same else os_error_text(exc)
            error(f"cannot write the documents to {directory}: {reason}")
            return FAILED
        for name in written:
            click.echo(f"wrote {_shown(directory / name)}")
        return 0
    drifted = drifted_documents(directory)
    for name in drifted:
        click.echo(f"{_shown(directory / name)}: out of date", err=True)
    if drifted:
        click.echo(f"{PROG}: run '{PROG} schemas --write' to regenerate", err=True)
        return 1
    return 0


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
