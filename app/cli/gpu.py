"""`ember cuda install | status | remove`: llama.cpp's CUDA backend, downloaded into the data
folder (app.gpu_module), for NVIDIA GPUs where Vulkan, which every build ships, is not enough."""

from __future__ import annotations

import json

import click

from app.cli import cli
from app.cli.common import ProgressBar


def size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@cli.group()
def cuda() -> None:
    """llama.cpp's CUDA backend: download it, see it, remove it."""


@cuda.command("install")
@click.option("--from", "source", default=None, metavar="URL|PATH",
              help="a cuda-module.json (URL, file, or a folder holding it and its files); "
                   "default: the one this Ember ships")
def install_cmd(source: str | None) -> None:
    """Download, verify (SHA-256) and install the CUDA module and its runtime libraries."""
    from app.config import paths
    from app.gpu_module.install import install, read_source

    found = read_source(source)
    m = found.manifest
    click.echo(f"llama.cpp's {m.backend} backend for llama-cpp-python {m.llama_cpp_version}"
               f"{f', {m.toolkit}' if m.toolkit else ''}"
               f"{f', GPUs {m.architectures}' if m.architectures else ''}: "
               f"{size(m.download_bytes)} to download", err=True)
    bar = ProgressBar()
    try:
        done = install(paths(), found, bar)
    finally:
        bar.close()
    click.echo(f"installed: {done.folder} ({size(done.bytes_on_disk)}); the next model load "
               "uses it (`ember hw` lists the GPUs it finds)")


@cuda.command("status")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def status_cmd(as_json: bool) -> None:
    """Whether the CUDA module is installed, for which llama.cpp, and whether it loads."""
    from dataclasses import asdict

    from app.config import paths
    from app.gpu_module.installed import installed
    from backends.gpu_modules import llama_cpp_version

    found = installed(paths(), "cuda")
    if as_json:
        click.echo(json.dumps(None if found is None else
                              {k: str(v) for k, v in asdict(found).items()}, indent=2))
        return
    if found is None:
        click.echo("llama.cpp's CUDA backend is not installed (`ember cuda install`)")
        return
    click.echo(f"installed  {found.folder} ({size(found.bytes_on_disk)})")
    click.echo(f"built for  llama-cpp-python {found.llama_cpp_version}"
               f"{f', {found.toolkit}' if found.toolkit else ''}"
               f"{f', GPUs {found.architectures}' if found.architectures else ''}")
    click.echo(f"from       {found.installed_from} at {found.installed_at}")
    if found.llama_cpp_version != llama_cpp_version():
        click.echo(f"stale      this Ember runs llama-cpp-python {llama_cpp_version()}, so it "
                   "does not load: run `ember cuda install` again")


@cuda.command("remove")
def remove_cmd() -> None:
    """Remove the downloaded CUDA module (llama.cpp then uses Vulkan or the CPU)."""
    from app.config import paths
    from app.gpu_module.installed import remove

    click.echo("removed" if remove(paths(), "cuda") else "no CUDA module was installed")
