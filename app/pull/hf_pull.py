"""`ember pull` of any Hub repo: `hf.co/OWNER/REPO[:QUANT]` (Ollama's syntax; also
`huggingface.co/...`, `https://huggingface.co/...`, or plain `OWNER/REPO[:QUANT]`).

A GGUF repo gives the quantization asked for (matched to the names in its file names, any
case), else the one the fit model recommends here from the files' own headers
(app.pull.hf_fit); a split GGUF comes as its whole set, and the repo's vision projector
(mmproj) with it. An MLX or safetensors repo comes as its whole folder. The files go through
the registry's downloader (app.pull.hf_snapshot.fetch_files: resumed, SHA-256 checked against
the Hub's LFS hash, disk space checked first, cancellable) and become a normal installed model
named after the repo (app.store.Store.install_hub_gguf / install_hub_directory).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time

from app.errors import ChecksumError, DownloadError
from app.hardware import HardwareProfile, detect
from app.hub_name import (
    PREFIXES,
    HubName,
    has_hub_prefix,
    hub_model_id,
    is_hub_name,
    parse_hub_name,
)
from app.pull import hf_hub
from app.pull.hf_fit import fit_repo, read_gguf_set, recommended
from app.pull.hf_repo import Quant, RepoListing, list_quants
from app.pull.hf_snapshot import RepoFile, fetch_files
from app.pull.progress import Cancelled, Progress, ProgressFn
from app.pull.pull_lock import pull_lock
from app.store import InstalledModel, Store, slug
from backends.errors import ModelFileError

log = logging.getLogger(__name__)
__all__ = ["PREFIXES", "HubName", "has_hub_prefix", "hub_model_id", "installed_from",
           "is_hub_name", "parse_hub_name", "pull_hub"]
def installed_from(store: Store, name: str) -> InstalledModel | None:
    """The installed model a Hub name means: of that repo, and that quantization if given."""
    parse_hub_name(name)  # a clear error for a name that is no Hub name
    return store.from_hub(name)


def choose_quant(listing: RepoListing, quant: str | None,
                 hw: HardwareProfile | None) -> tuple[Quant, str]:
    """The quantization to pull, and why (for the user)."""
    if not listing.quants:
        raise DownloadError(f"hf.co/{listing.repo} has no GGUF, MLX or safetensors model "
                            "Ember can run")
    if quant:
        return listing.quant(quant), "asked for"
    if len(listing.quants) == 1:
        return listing.quants[0], "the only one in the repo"
    hw = hw or detect()
    fits = fit_repo(listing, hw)
    best = recommended(fits, hw)
    if best is None or best.fit is None:
        smallest = min(listing.quants, key=lambda q: q.size)
        return smallest, "the smallest (no header could be read to fit the others)"
    return best.quant, f"recommended here: {best.fit.explain()}"


def pull_hub(name: str, store: Store | None = None, on_progress: ProgressFn | None = None,
             cancel: threading.Event | None = None,
             hw: HardwareProfile | None = None) -> InstalledModel:
    store = store or Store()
    report = on_progress or (lambda p: None)
    hub = parse_hub_name(name)
    listing = list_quants(hub.repo)
    if listing.gated and not hf_hub._token():  # no token cannot have accepted the licence
        raise hf_hub.GatedRepoError(hf_hub.gated_message(hub.repo))
    quant, why = choose_quant(listing, hub.quant, hw)
    ref = f"{hub.model_id}:{quant.name}"
    log.info("pulling %s from hf.co/%s (%s: %s)", ref, hub.repo, quant.name, why)
    if not hub.quant:
        report(Progress(ref, "download", 0, quant.size, message=f"picked {quant.name}: {why}"))

    def waiting() -> None:
        report(Progress(ref, "download", 0, quant.size,
                        message="waiting for another pull of this model to finish"))

    lock = store.paths.partial / f"hub-{hub.model_id}-{slug(quant.name)}.lock"
    with pull_lock(lock, cancel, waiting):
        return _pull(listing, quant, hub, store, report, cancel)


def _pull(listing: RepoListing, quant: Quant, hub: HubName, store: Store, report: ProgressFn,
          cancel: threading.Event | None) -> InstalledModel:
    ref = f"{hub.model_id}:{quant.name}"
    for m in store.list():
        if m.id == hub.model_id and m.quant.lower() == quant.name.lower():
            report(Progress(m.ref, "done", m.size_bytes, m.size_bytes,
                            message="already installed"))
            return m
    folder = store.hub_folder(hub.repo)  # refuses a name that leaves the store
    # the same file (or folder) installed under another name: a registry model of this repo
    owner = store.installed_at(folder / quant.files[0].basename if quant.format == "gguf"
                               else folder)
    if owner is not None:
        report(Progress(owner.ref, "done", owner.size_bytes, owner.size_bytes,
                        message=f"already installed as {owner.ref}"))
        return owner
    if quant.format == "gguf" and hub.quant:  # (a recommendation has read the headers)
        read_gguf_set(hub.repo, quant, listing.sha)  # no GGUF: refused before its GBs come
    projector = listing.projector() if quant.format == "gguf" else None
    files = list(quant.files) + ([projector] if projector is not None
                                 and not (folder / projector.basename).exists() else [])
    work = store.paths.partial / f"hub-{hub.model_id}-{slug(quant.name)}"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        got = fetch_files(hub.repo, [RepoFile(f.name, f.expected) for f in files], ref, work,
                          report, cancel)
    except Cancelled:
        log.info("pulling %s cancelled; what was downloaded is kept for the next pull", ref)
        raise
    except ChecksumError as e:  # the damaged file is gone; the verified ones are kept
        log.error("pulling %s: %s", ref, e)
        raise
    report(Progress(ref, "install", quant.size, quant.size))
    try:
        if quant.format == "gguf":
            model = store.install_hub_gguf(
                got.folder, [f.name for f in quant.files],
                # the projector already beside the model (another quantization brought it) is
                # recorded too, so `ember rm` of either keeps it for the other
                projector.name if projector is not None else None,
                got.sha256, hub.model_id, quant.name, hub.repo)
        else:
            model = store.install_hub_directory(got.folder, got.sha256, hub.model_id,
                                                quant.name, hub.repo)
    except ModelFileError:  # verified as the Hub's bytes, but not a model Ember can load
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    log.info("installed %s from hf.co/%s in %.1f s: %s", model.ref, hub.repo,
             time.monotonic() - started, model.path)
    report(Progress(model.ref, "done", model.size_bytes, model.size_bytes,
                    message=f"installed {model.path}"))
    return model
