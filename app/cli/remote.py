"""`ember remote add/list/rm`: OpenAI-compatible servers whose models Ember uses as NAME/model."""

from __future__ import annotations

import json
from typing import Any

import click

from app.cli import cli
from app.runtime import endpoints
from backends.errors import EmberError


@cli.group()
def remote() -> None:
    """Remote OpenAI-compatible servers (vLLM, SGLang, llama-server, another Ember).

    Their models appear beside local ones as NAME/model: `ember run NAME/model PROMPT`.
    """


def _masked(key: str | None) -> str:
    if not key:
        return "no key"
    return "key " + ("*" * 4 + key[-4:] if len(key) > 8 else "****")


def _models(endpoint: endpoints.Endpoint) -> tuple[list[str], str | None]:
    try:
        return endpoints.model_ids(endpoint), None
    except EmberError as e:
        return [], str(e)


@remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
@click.option("--no-check", is_flag=True, help="save without asking the server for its models")
def add(name: str, url: str, api_key: str | None, no_check: bool) -> None:
    """Add (or replace) endpoint NAME at URL, e.g. http://gpu-box:8000/v1."""
    replaced = name in endpoints.endpoints()
    endpoint = endpoints.add(name, url, api_key)
    click.echo(f"{'replaced' if replaced else 'added'} remote {name} -> {endpoint.base} "
               f"({_masked(api_key)})")
    if no_check:
        return
    models, error = _models(endpoint)
    if error:
        # saved anyway: the server may simply be down right now
        click.echo(f"warning: {error}", err=True)
    else:
        click.echo(f"{len(models)} models: " + ", ".join(f"{name}/{m}" for m in models))


@remote.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--offline", is_flag=True, help="do not ask the servers for their models")
def list_(as_json: bool, offline: bool) -> None:
    """The endpoints, and the models each serves now."""
    rows: list[dict[str, Any]] = []  # as --json prints them
    for endpoint in endpoints.endpoints().values():
        models, error = ([], None) if offline else _models(endpoint)
        rows.append({"name": endpoint.name, "url": endpoint.base,
                     "api_key": bool(endpoint.api_key), "models": models, "error": error})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no remote endpoints; add one with `ember remote add NAME URL`")
        return
    for endpoint, row in zip(endpoints.endpoints().values(), rows, strict=True):
        state = ("" if offline else f"error: {row['error']}" if row["error"]
                 else f"{len(row['models'])} models")
        click.echo(f"{row['name']:16} {row['url']:40} {_masked(endpoint.api_key):10} {state}")
        for m in row["models"]:
            click.echo(f"  {row['name']}/{m}")


@remote.command("rm")
@click.argument("name")
def rm(name: str) -> None:
    """Remove endpoint NAME (its server is not touched)."""
    removed = endpoints.remove(name)
    click.echo(f"removed remote {removed.name} ({removed.base})")
