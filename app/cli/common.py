"""What the commands share: sampling options, the download progress bar, model lookup."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from app.errors import ModelNotFoundError
from app.store import InstalledModel, Store
from backends.base import SamplingParams

if TYPE_CHECKING:
    from app.pull.progress import Progress


def sampling_options(f: Callable) -> Callable:
    options = [
        click.option("--temperature", type=float, default=0.8, show_default=True,
                     help="0 = greedy"),
        click.option("--top-p", type=float, default=0.95, show_default=True),
        click.option("--top-k", type=int, default=40, show_default=True),
        click.option("--min-p", type=float, default=0.05, show_default=True),
        click.option("--repeat-penalty", type=float, default=1.0, show_default=True),
        click.option("--seed", type=int, default=None),
        click.option("--stop", multiple=True, help="stop string (repeatable)"),
        click.option("--max-tokens", type=int, default=512, show_default=True),
        click.option("--ctx", "context", type=int, default=None,
                     help="context size (default: from the load plan)"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def sampling_from(kw: dict) -> SamplingParams:
    return SamplingParams(temperature=kw["temperature"], top_p=kw["top_p"], top_k=kw["top_k"],
                          min_p=kw["min_p"], repeat_penalty=kw["repeat_penalty"],
                          seed=kw["seed"], stop=tuple(kw["stop"]), max_tokens=kw["max_tokens"])


class ProgressBar:
    """tqdm bars fed by download Progress events: bytes, speed, ETA."""

    def __init__(self) -> None:
        self._bar: Any = None  # a tqdm bar (tqdm ships no type information)
        self._phase: str | None = None

    def __call__(self, p: Progress) -> None:
        from tqdm import tqdm

        if p.phase == "done":
            self.close()
            click.echo(f"{p.model}: {p.message}", err=True)
            return
        if p.phase != self._phase:
            self.close()
            self._phase = p.phase
            label = {"download": "downloading", "verify": "verifying", "install": "installing"}
            self._bar = tqdm(total=p.total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                             desc=f"{label.get(p.phase, p.phase)} {p.model}", file=sys.stderr,
                             initial=p.done_bytes)
            if p.message:
                self._bar.write(f"{p.model}: {p.message}")
        if self._bar is not None:
            self._bar.update(p.done_bytes - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def pull_with_bar(name: str) -> InstalledModel:
    from app.pull.hf_pull import is_hub_name
    from app.pull.install import pull, resolve

    if ":" not in name and not is_hub_name(name):
        spec, variant = resolve(name)
        click.echo(f"{spec.id}: picked {variant.quant} for this machine "
                   f"(`ember pull {spec.id}:QUANT` picks another)", err=True)
        name = f"{spec.id}:{variant.quant}"
    bar = ProgressBar()
    try:
        return pull(name, on_progress=bar)
    finally:
        bar.close()


def installed_or_pull(name: str) -> InstalledModel:
    """Like Ollama: a registry model (or a hf.co/OWNER/REPO[:QUANT]) that is not installed
    yet is pulled first."""
    store = Store()
    from app.pull.hf_pull import has_hub_prefix, installed_from

    if has_hub_prefix(name):
        found = installed_from(store, name)
        if found is not None:
            return found
        click.echo(f"{name} is not installed yet; pulling it first", err=True)
        return pull_with_bar(name)
    try:
        return store.get(name)
    except ModelNotFoundError:
        from app.registry import load_registry

        load_registry().get(name.partition(":")[0])  # not in the registry either: that error
        click.echo(f"{name} is not installed yet; pulling it first", err=True)
        return pull_with_bar(name)




def gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
