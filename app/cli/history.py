"""`ember history list/export/import`: the window's conversations from the terminal
(`ember import` already imports a GGUF file, so these live under `history`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from app.cli import cli
from app.config import paths
from app.export import export_file, import_file, media_uri, to_json, to_markdown, trees
from app.history import History


@cli.group("history")
def history_group() -> None:
    """The window's conversations: list them, export them (Markdown or JSON), import JSON."""


def _open() -> History:
    return History(paths().history_db)


@history_group.command("list")
def list_() -> None:
    """Each conversation's id, number of messages and title, newest first."""
    h = _open()
    try:
        for conv in h.conversations():
            click.echo(f"{conv.id:6}  {len(h.all_messages(conv.id)):4} messages  {conv.title}")
    finally:
        h.close()


@history_group.command("export")
@click.argument("ids", nargs=-1, type=int)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="file to write (default: standard output)")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default=None,
              help="md (to read) or json (imports back); default: by the file's suffix, "
                   "else md")
def export(ids: tuple[int, ...], output: Path | None, fmt: str | None) -> None:
    """Export conversations IDS (default: all; see `ember history list`)."""
    fmt = fmt or ("json" if output is not None and output.suffix.lower() == ".json" else "md")
    h = _open()
    try:
        if output is not None:  # Markdown: the images copied beside it (app.export)
            count = export_file(h, output, list(ids) or None, fmt)
            click.echo(f"exported {count} conversation(s) to {output}", err=True)
            return
        items = trees(h, list(ids) or None)
        text = to_json(items, h.read_media) if fmt == "json" else \
            to_markdown(items, media_uri(h))
    finally:
        h.close()
    sys.stdout.write(text)


@history_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def import_(file: Path) -> None:
    """Add the conversations of an Ember JSON export (nothing is added if any part is bad)."""
    h = _open()
    try:
        ids = import_file(h, file)
    finally:
        h.close()
    click.echo(f"imported {len(ids)} conversation(s): ids {', '.join(map(str, ids))}")
