"""Commands about any Hugging Face repo: `ember search` (and `ember pull hf.co/...`, which is
`ember pull`'s)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from app.cli import cli


def _age(when: datetime | None) -> str:
    if when is None:
        return "?"

    days = (datetime.now(UTC) - when).days
    return "today" if days <= 0 else f"{days}d ago" if days < 60 else when.date().isoformat()


def _size(n: int) -> str:
    return f"{n / 1e9:6.2f} GB" if n >= 1e8 else f"{n / 1e6:6.1f} MB"


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


@cli.command()
@click.argument("query", required=False, default="")
@click.option("--gguf", "fmt", flag_value="gguf", help="GGUF repos only (llama.cpp)")
@click.option("--mlx", "fmt", flag_value="mlx", help="MLX repos only")
@click.option("--sort", type=click.Choice(["downloads", "recent", "likes"]),
              default="downloads", show_default=True)
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def search(query: str, fmt: str | None, sort: str, limit: int, as_json: bool) -> None:
    """Search the Hugging Face Hub for GGUF and MLX models (`ember pull hf.co/REPO` then)."""
    from app.pull.hf_search import search as hub_search

    repos = hub_search(query, fmt, sort, limit)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in repos], indent=2))
        return
    if not repos:
        click.echo(f"no {fmt or 'GGUF or MLX'} repos on the Hub match {query!r}")
        return
    click.echo(f"{'REPO':56} {'FORMAT':9} {'DOWNLOADS':>9} {'LIKES':>6}  {'UPDATED':10}  "
               "LICENSE")
    for r in repos:
        licence = (r.license or "?") + (" (gated)" if r.gated else "")
        click.echo(f"{r.id:56} {'/'.join(r.formats) or '?':9} {_count(r.downloads):>9} "
                   f"{_count(r.likes):>6}  {_age(r.last_modified):10}  {licence}")
    click.echo("\npull one with `ember pull hf.co/REPO` (`:QUANT` for a given "
               "quantization; `ember files REPO` lists them with their fit here)", err=True)


@cli.command()
@click.argument("repo")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--ctx", "context", type=int, default=None, help="context for the predictions")
def files(repo: str, as_json: bool, context: int | None) -> None:
    """A Hub repo's quantizations, each with its fit here (read from the files' headers
    only, nothing downloaded)."""
    from app.hardware import detect
    from app.pull.hf_fit import fit_repo, recommended
    from app.pull.hf_pull import parse_hub_name
    from app.pull.hf_repo import list_quants

    name = parse_hub_name(repo)
    listing = list_quants(name.repo)
    hw = detect()
    fits = fit_repo(listing, hw, context)
    best = recommended(fits, hw)
    projector = listing.projector()
    if as_json:
        click.echo(json.dumps({
            "repo": listing.repo, "gated": listing.gated, "license": listing.license,
            "recommended": best.quant.name if best else None,
            "projector": projector.name if projector else None,
            "quants": [{"name": f.quant.name, "format": f.quant.format,
                        "size_bytes": f.quant.size, "files": [x.name for x in f.quant.files],
                        "fit": f.fit.to_json() if f.fit else None, "error": f.error,
                        "header_bytes": f.header_bytes} for f in fits]}, indent=2))
        return
    click.echo(f"hf.co/{listing.repo}  licence {listing.license or '?'}"
               + ("  (gated: accept it on the Hub, set HF_TOKEN)" if listing.gated else ""))
    if not fits:
        click.echo("  no GGUF, MLX or safetensors model Ember can run")
    for f in fits:
        star = "*" if best is not None and f is best else " "
        parts = f" ({len(f.quant.files)} parts)" if f.quant.split else ""
        what = f.fit.explain() if f.fit else f"cannot fit: {f.error}"
        click.echo(f" {star}{f.quant.name:14} {_size(f.quant.size)}{parts}  {what}")
    if projector:
        click.echo(f"  vision projector {projector.name} comes with any of them")
