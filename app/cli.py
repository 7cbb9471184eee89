"""The `ember` command."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import click

from app import __version__
from app.config import DEFAULT_MODEL
from app.errors import EmberError, ModelNotFoundError
from app.store import InstalledModel, Store
from backends.base import (
    DoneEvent,
    ErrorEvent,
    GenerationRequest,
    Message,
    SamplingParams,
    Stats,
    TokenEvent,
)


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


def _sampling(kw: dict) -> SamplingParams:
    return SamplingParams(temperature=kw["temperature"], top_p=kw["top_p"], top_k=kw["top_k"],
                          min_p=kw["min_p"], repeat_penalty=kw["repeat_penalty"],
                          seed=kw["seed"], stop=tuple(kw["stop"]), max_tokens=kw["max_tokens"])


class ProgressBar:
    """tqdm bars fed by download Progress events: bytes, speed, ETA."""

    def __init__(self) -> None:
        self._bar = None
        self._phase = None

    def __call__(self, p) -> None:  # noqa: ANN001 - app.download.Progress
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


def _pull(name: str) -> InstalledModel:
    from app.download import pull, resolve

    if ":" not in name:
        spec, variant = resolve(name)
        click.echo(f"{spec.id}: picked {variant.quant} for this machine "
                   f"(`ember pull {spec.id}:QUANT` picks another)", err=True)
        name = f"{spec.id}:{variant.quant}"
    bar = ProgressBar()
    try:
        return pull(name, on_progress=bar)
    finally:
        bar.close()


def _installed_or_pull(name: str) -> InstalledModel:
    """Like Ollama: a registry model that is not installed yet is pulled first."""
    store = Store()
    try:
        return store.get(name)
    except ModelNotFoundError:
        from app.registry import load_registry

        load_registry().get(name.partition(":")[0])  # not in the registry either: that error
        click.echo(f"{name} is not installed yet; pulling it first", err=True)
        return _pull(name)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ember")
@click.option("--serve", "serve_flag", is_flag=True, help="same as `ember serve`")
@click.pass_context
def cli(ctx: click.Context, serve_flag: bool) -> None:
    """Ember: run large language models on your own machine.

    With no command, Ember starts an interactive chat on the default model
    (installing it first if needed).
    """
    if ctx.invoked_subcommand is None:
        if serve_flag:
            ctx.invoke(serve)
        else:
            ctx.invoke(chat, model=DEFAULT_MODEL)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=11435, show_default=True, type=int)
@click.option("--api-key", default=None, envvar="EMBER_API_KEY",
              help="require 'Authorization: Bearer KEY' (needed off loopback)")
@click.option("--insecure-no-auth", is_flag=True, help="allow a non-loopback bind without a key")
@click.option("--cors-origin", multiple=True, help="allow browser calls from this origin")
@click.option("--idle-ttl", default=600.0, show_default=True, type=float,
              help="seconds a model stays loaded after its last request")
@click.option("--queue-limit", default=16, show_default=True, type=int,
              help="requests that may wait; beyond, 429")
@click.option("--parallel", default=8, show_default=True, type=int,
              help="sequences decoded together per model (fewer if memory is short)")
def serve(host: str, port: int, api_key: str | None, insecure_no_auth: bool,
          cors_origin: tuple[str, ...], idle_ttl: float, queue_limit: int,
          parallel: int) -> None:
    """Serve the OpenAI- and Ollama-compatible HTTP API."""
    try:
        import uvicorn

        from app.server.app import ServerSettings, check_bind, create_app
    except ImportError as e:
        raise EmberError(f"the server needs the 'serve' extra ({e.name} is missing): "
                         "pip install -e '.[serve]'") from e
    from app.runtime import Runtime

    settings = ServerSettings(host=host, port=port, api_key=api_key,
                              insecure_no_auth=insecure_no_auth, cors_origins=cors_origin,
                              idle_ttl_s=idle_ttl, queue_limit=queue_limit, parallel=parallel)
    check_bind(settings)
    app = create_app(Runtime(idle_ttl_s=idle_ttl, parallel=parallel), settings)
    click.echo(f"Ember API on http://{host}:{port} (OpenAI: /v1, Ollama: /api)"
               + (", API key required" if api_key else ""), err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


BEST_MODELS_SHOWN = 8
READABLE_SPEED = 8.0  # tokens/s: below this a model is listed after the faster ones


def _best_models(hw, context: int | None = None) -> list:  # noqa: ANN001
    from app.fit import recommend
    from app.registry import load_registry

    fits = []
    for spec in load_registry().models:
        fit = recommend(spec, hw, context)
        if spec.chat and fit is not None and fit.decode_tokens_per_s >= 1.0:
            fits.append((spec, fit))
    fits.sort(key=lambda sf: (sf[1].decode_tokens_per_s >= READABLE_SPEED, sf[0].params),
              reverse=True)
    return fits[:BEST_MODELS_SHOWN]


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--ctx", "context", type=int, default=None, help="context for the predictions")
def hw(as_json: bool, context: int | None) -> None:
    """This machine, the backend Ember uses here and why, and the models that run best."""
    from app.hardware import detect
    from app.selection import choose_backend

    profile = detect()
    choice = choose_backend(profile)
    best = _best_models(profile, context)
    if as_json:
        click.echo(json.dumps({
            "hardware": profile.to_json(),
            "backend": {"name": choice.name, "reason": choice.reason},
            "recommendations": [{"id": spec.id, "name": spec.name, **fit.to_json()}
                                for spec, fit in best]}, indent=2))
        return
    click.echo("Your machine")
    isa = ", ".join(f.upper() for f in profile.isa if f in ("avx2", "avx512f", "amx_tile", "neon"))
    click.echo(f"  CPU      {profile.cpu}, {profile.physical_cores} cores ({isa}), "
               f"{profile.cpu_bandwidth_gbps:.0f} GB/s {profile.bandwidth_source}")
    click.echo(f"  RAM      {_gb(profile.ram_total)} total, {_gb(profile.ram_available)} "
               "available")
    for g in profile.gpus:
        click.echo(f"  GPU      {g.name}, {_gb(g.vram_total)} ({_gb(g.vram_free)} free)"
                   + (f", {g.bandwidth_gbps:.0f} GB/s" if g.bandwidth_gbps else ""))
    if not profile.gpus:
        click.echo("  GPU      none")
    for note in profile.notes:
        click.echo(f"  note     {note}")
    click.echo(f"Backend    {choice.name}: {choice.reason}")
    click.echo("")
    click.echo("Best models for this machine:")
    for spec, fit in best:
        click.echo(f"  {spec.id:34} {fit.quant:7} {fit.explain()}")


def _variant_json(v) -> dict:  # noqa: ANN001
    sources = []
    for s in v.sources:
        if s.kind == "hf":
            sources.append({"kind": "hf", "repo": s.repo, "file": s.file})
        else:
            sources.append({"kind": s.kind, "packages": list(s.packages)})
    return {"format": v.format, "quant": v.quant, "file": v.file, "size_bytes": v.size_bytes,
            "sha256": v.sha256, "sources": sources}


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--fit", "with_fit", is_flag=True, help="add the best variant for this machine")
def catalog(as_json: bool, with_fit: bool) -> None:
    """The models Ember knows (the registry), optionally with how each fits here."""
    from dataclasses import asdict

    from app.fit import recommend
    from app.hardware import detect
    from app.registry import load_registry

    profile = detect() if with_fit else None
    rows = []
    for spec in load_registry().models:
        row = {"id": spec.id, "family": spec.family, "name": spec.name,
               "description": spec.description, "license": spec.license, "params": spec.params,
               "context": {"default": spec.context_default, "max": spec.context_max},
               "chat": spec.chat, "embedding": spec.embedding, "arch": asdict(spec.arch),
               "variants": [_variant_json(v) for v in spec.variants]}
        if profile is not None:
            fit = recommend(spec, profile)
            row["fit"] = None if fit is None else {
                "variant": {"format": fit.format, "quant": fit.quant}, **fit.to_json()}
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        quants = ", ".join(sorted({v["quant"] for v in row["variants"] if v["format"] == "gguf"}))
        line = f"{row['id']:34} {row['params'] / 1e9:6.2f}B  {quants}"
        if row.get("fit"):
            line += f"  -> {row['fit']['quant']}: {row['fit']['explanation']}"
        click.echo(line)


@cli.command()
@click.argument("model")
def pull(model: str) -> None:
    """Download and install MODEL[:QUANT] (SHA-256 verified)."""
    _pull(model)


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def list_models(as_json: bool) -> None:
    """List installed models."""
    models = Store().list()
    if as_json:
        click.echo(json.dumps([m.to_json() for m in models], indent=2))
        return
    if not models:
        click.echo("no models installed; try `ember pull qwen2.5-coder-0.5b-instruct`")
        return
    click.echo(f"{'MODEL':40} {'QUANT':8} {'SIZE':>9}  {'ARCH':8} PATH")
    for m in models:
        click.echo(f"{m.id:40} {m.quant:8} {m.size_bytes / 1e9:7.2f}GB  {m.architecture:8} "
                   f"{m.path}")


@cli.command()
@click.argument("model")
def rm(model: str) -> None:
    """Remove an installed model (its file and manifest)."""
    removed = Store().remove(model)
    click.echo(f"removed {removed.ref} ({removed.path})")


@cli.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
def import_(path: str) -> None:
    """Install your own GGUF file (copied; named from its metadata)."""
    m = Store().import_gguf(path)
    click.echo(f"imported {m.ref} ({m.architecture}, {m.size_bytes / 1e9:.2f} GB) -> {m.path}")


def _stats_line(stats: Stats) -> str:
    line = (f"{stats.completion_tokens} tokens, first token {stats.ttft_s:.2f} s, "
            f"{stats.decode_tokens_per_s:.1f} tokens/s, {stats.finish_reason}")
    if stats.truncated:
        line += " - earlier turns were dropped to fit the context"
    return line


@cli.command()
@click.argument("model")
@click.argument("prompt")
@sampling_options
@click.option("--system", default=None, help="system prompt")
@click.option("--raw", is_flag=True, help="send PROMPT as-is, without the chat template")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object with the stats")
def run(model: str, prompt: str, system: str | None, raw: bool, as_json: bool, **kw) -> None:
    """Answer PROMPT with MODEL, streaming to the terminal ("-" reads PROMPT from stdin)."""
    from app.runtime import Runtime

    if prompt == "-":
        prompt = sys.stdin.read()
    installed = _installed_or_pull(model)
    sampling = _sampling(kw)
    if raw or not installed.chat:
        if system:
            raise EmberError(f"--system needs a chat model; {installed.ref} takes a raw prompt")
        request = GenerationRequest(prompt=prompt, sampling=sampling)
    else:
        messages = ((Message("system", system),) if system else ()) + (Message("user", prompt),)
        request = GenerationRequest(messages=messages, sampling=sampling)
    request.validate()
    with Runtime() as rt:
        loaded = rt.load(installed.ref, kw["context"])
        generation = rt.generate(installed.ref, request)
        done = None
        try:
            for event in generation:
                if isinstance(event, TokenEvent) and not as_json:
                    click.echo(event.text, nl=False)
                elif isinstance(event, DoneEvent):
                    done = event
                elif isinstance(event, ErrorEvent):
                    raise EmberError(event.message)
        except KeyboardInterrupt:
            generation.cancel()
            click.echo("\n[cancelled]", err=True)
            sys.exit(130)
    assert done is not None
    if as_json:
        st = done.stats
        click.echo(json.dumps({
            "text": done.text, "model": installed.id, "backend": loaded.backend,
            "prompt_tokens": st.prompt_tokens, "completion_tokens": st.completion_tokens,
            "ttft_s": st.ttft_s, "decode_tokens_per_s": st.decode_tokens_per_s,
            "finish_reason": st.finish_reason, "truncated": st.truncated}))
    else:
        click.echo()
        click.echo(f"[{_stats_line(done.stats)}]", err=True)


CHAT_HELP = "/reset clears the conversation, /system TEXT sets the system prompt, /bye leaves"


@cli.command()
@click.argument("model", default=DEFAULT_MODEL)
@sampling_options
@click.option("--system", default=None, help="system prompt")
def chat(model: str, system: str | None, **kw) -> None:
    """Chat with MODEL in the terminal. Ctrl+C stops an answer; Ctrl+D or /bye leaves."""
    from app.runtime import Runtime

    installed = _installed_or_pull(model)
    if not installed.chat:
        raise EmberError(f"{installed.ref} has no chat template (a base model); "
                         f"use `ember run {installed.id} PROMPT` for completions")
    sampling = _sampling(kw)
    sampling.validate()
    history: list[Message] = []
    with Runtime() as rt:
        loaded = rt.load(installed.ref, kw["context"])
        click.echo(f"{installed.ref} on {loaded.backend} ({loaded.plan.reason})", err=True)
        click.echo(CHAT_HELP, err=True)
        while True:
            try:
                line = input(">>> ")
            except EOFError:
                click.echo()
                return
            except KeyboardInterrupt:
                click.echo("\n(Ctrl+D or /bye to leave)")
                continue
            text = line.strip()
            if not text:
                continue
            if text in ("/bye", "/exit", "/quit"):
                return
            if text == "/reset":
                history.clear()
                click.echo("(conversation cleared)")
                continue
            if text.startswith("/system"):
                system = text.removeprefix("/system").strip() or None
                click.echo(f"(system prompt {'set' if system else 'cleared'})")
                continue
            if text.startswith("/"):
                click.echo(f"unknown command {text.split()[0]!r}; {CHAT_HELP}")
                continue
            history.append(Message("user", line))
            messages = ((Message("system", system),) if system else ()) + tuple(history)
            generation = rt.generate(installed.ref, GenerationRequest(messages=messages,
                                                                       sampling=sampling))
            answer = ""
            try:
                for event in generation:
                    if isinstance(event, TokenEvent):
                        answer += event.text
                        click.echo(event.text, nl=False)
                    elif isinstance(event, DoneEvent):
                        click.echo()
                        click.echo(f"[{_stats_line(event.stats)}]", err=True)
                    elif isinstance(event, ErrorEvent):
                        click.echo(f"\nerror: {event.message}", err=True)
            except KeyboardInterrupt:
                generation.cancel()
                for _ in generation:  # drain to the final event so the worker is free
                    pass
                click.echo("\n[stopped]", err=True)
            if answer:
                history.append(Message("assistant", answer))
            else:
                history.pop()  # nothing came back: keep the history a valid alternation


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except EmberError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
