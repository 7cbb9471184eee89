"""`ember convert`: turn an installed model into another format (GGUF -> MLX today)."""

from __future__ import annotations

import time

import click

from app.cli import cli


@cli.command()
@click.argument("model")
@click.option("--to", "target", type=click.Choice(["mlx"]), required=True,
              help="the format to make")
@click.option("--bits", type=click.Choice(["4", "8"]), default="4", show_default=True,
              help="MLX quantization (group size 64); 8 keeps a 4-5 bit GGUF's quality, 4 "
                   "rounds it a second time")
def convert(model: str, target: str, bits: str) -> None:
    """Convert an installed GGUF MODEL into an MLX model, installed as MODEL-mlx:<bits>bit."""
    from app.runtime.convert_to_mlx import convert_to_mlx

    started = time.perf_counter()
    installed = convert_to_mlx(model, int(bits),
                               on_step=lambda msg: click.echo(f"{model}: {msg}", err=True))
    click.echo(f"installed {installed.ref} ({installed.size_bytes / 1e9:.2f} GB, "
               f"{time.perf_counter() - started:.0f} s) -> {installed.path}")
    click.echo(f"run it with `ember run {installed.ref} PROMPT`")
