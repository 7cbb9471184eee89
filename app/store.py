"""The local model store: what is installed, importing a user's GGUF, removing.

Models are plain files under `models/<publisher>/<repo>/<file>` so other tools can use them.
Beside each file, `<file>.ember.json` records what it is; it is written last, by rename, so a
half-copied or unverified file is never listed as installed.

A split GGUF (`NAME-00001-of-00003.gguf` ...) is one model: its manifest is beside the first
part, which is what llama.cpp opens (it finds the others by name); a Hub repo's vision
projector (`mmproj*.gguf`) is kept beside its model.

An MLX model is a directory (config.json, safetensors, tokenizer files, as in an mlx-community
repo): `models/<publisher>/<repo>/` is the model, and its manifest is `mlx.ember.json` inside.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from app import config
from app.errors import ModelNotFoundError
from app.gguf_file import read_gguf, split_parts
from app.hub_name import has_hub_prefix, parse_hub_name
from app.registry import ModelSpec, Variant, load_registry, suggest
from backends.errors import EmberError

log = logging.getLogger(__name__)
MANIFEST_SUFFIX = ".ember.json"
DIR_MANIFEST = "mlx" + MANIFEST_SUFFIX  # inside a directory model
DIR_FORMATS = frozenset({"mlx"})  # formats whose model is a directory
# In the models folder: rewritten (a fresh token, by rename) by every install and removal
# through a Store, in any process. A Store's index of installed models is good while the
# token it read is still there: one small read per `get`, where a scan globs and parses
# every manifest and stats every model file. (A folder's mtime would not do: manifests lie
# two folders down, and an mtime can repeat within its clock tick.)
STAMP = ".ember-changed"


@dataclass(frozen=True)
class InstalledModel:
    id: str
    quant: str
    format: str
    path: Path
    size_bytes: int
    sha256: str
    architecture: str
    context_length: int  # trained context, from the file
    chat: bool  # has a chat template
    origin: str  # "registry" | "import" | "hub" (any Hub repo, app.pull.hf_pull)
    installed_at: float
    repo: str = ""  # the Hub repo a "hub" model came from (owner/name)
    # the multimodal projector's file name (mmproj*.gguf), beside the model; "" for none
    projector_file: str = ""

    @property
    def ref(self) -> str:
        return f"{self.id}:{self.quant}"

    @property
    def projector(self) -> Path | None:
        """The vision (or audio) projector beside the model, if it has one and it is there.
        Only a plain file name is taken from the manifest: a crafted one cannot point
        elsewhere."""
        name = Path(self.projector_file).name
        if not name or name != self.projector_file or self.format != "gguf":
            return None
        path = self.path.parent / name
        return path if path.is_file() else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return s or "model"


class Store:
    def __init__(self, paths: config.Paths | None = None) -> None:
        self.paths = paths or config.paths()
        self._index: Sequence[InstalledModel] | None = None  # as the last scan found them
        self._index_stamp: str | None = None  # the STAMP token that scan read

    def inside_models(self, path: Path) -> Path:
        """`path`, if it lies in the models folder once `..` and symlinks are resolved; an
        EmberError otherwise. Every path from a manifest, a model or repo name, or an import
        passes here: a crafted name or manifest must not make Ember write or delete
        elsewhere."""
        root = self.paths.models.resolve()
        if _outside(path, root):
            raise EmberError(f"refusing {path}: it is outside Ember's models folder ({root})")
        return path

    # -- reading ---------------------------------------------------------------------------
    def list(self) -> list[InstalledModel]:
        """The installed models, read from their manifests now (and the index refreshed)."""
        stamp = self._stamp()
        found = self._scan()
        self._index, self._index_stamp = found, stamp
        return list(found)

    def _stamp(self) -> str | None:
        try:
            return (self.paths.models / STAMP).read_text(encoding="utf-8")
        except OSError:
            return None

    def _indexed(self) -> Sequence[InstalledModel]:
        """The index, scanned again when a Store (of this process or another) installed or
        removed a model since it was read."""
        if self._index is None or self._stamp() != self._index_stamp:
            return self.list()
        return self._index

    def _touch(self) -> None:
        """Tell every Store that the installed models changed (STAMP)."""
        self.paths.models.mkdir(parents=True, exist_ok=True)
        stamp = self.paths.models / STAMP
        tmp = stamp.with_name(f"{STAMP}.{os.getpid()}.tmp")
        tmp.write_text(os.urandom(16).hex(), encoding="utf-8")
        os.replace(tmp, stamp)
        self._index = None

    def _scan(self) -> Sequence[InstalledModel]:
        found: list[InstalledModel] = []
        if not self.paths.models.exists():
            return found
        root = self.paths.models.resolve()
        for manifest in sorted(self.paths.models.glob(f"*/*/*{MANIFEST_SUFFIX}")):
            try:
                raw = json.loads(manifest.read_text(encoding="utf-8"))
                # the model is the one beside its manifest, whatever path the manifest
                # records: a crafted one must not make `ember rm` delete /etc/passwd, and a
                # data folder moved elsewhere (or copied) keeps its models
                raw["path"] = _beside(manifest, raw["format"])
                model = InstalledModel(**raw)
            except (OSError, ValueError, TypeError, KeyError):
                continue  # a foreign or damaged manifest is not an installed model
            if _outside(model.path, root):  # a symlink out of the store
                log.warning("ignoring %s: %s is outside Ember's models folder", manifest,
                            model.path)
                continue
            if _complete(model):
                found.append(model)
        return found

    def get(self, name: str, prefer: str | None = None) -> InstalledModel:
        """`id` or `id:quant`; an id with several quantizations gives the first installed,
        in the format `prefer` if one is (app.runtime.backend_choice.preferred_format)."""
        if has_hub_prefix(name):  # hf.co/OWNER/REPO[:QUANT]: the model pulled by that name
            found = self.from_hub(name)
            if found is not None:
                return found
        base, _, quant = name.partition(":")
        installed = self._indexed()
        for scanned in (False, True):
            matches = [m for m in installed if m.id == base.lower()
                       and (not quant or m.quant.lower() == quant.lower())]
            found = next((m for m in matches if m.format == prefer), matches[0]) \
                if matches else None
            # a miss, or files gone since the scan, looks again: a manifest written by hand
            # (or by an older Ember, which left no STAMP) and a file deleted by hand count
            if found is not None and _complete(found):
                return found
            if scanned:
                break
            installed = self.list()
        names = [m.id for m in installed]
        hints = suggest(base, names)
        where = "installed models"
        try:
            spec = load_registry().get(base)
            where = f"installed models; it is in the registry: run `ember pull {spec.id}`"
        except EmberError:
            pass
        raise ModelNotFoundError(name, hints, where)

    def from_hub(self, name: str) -> InstalledModel | None:
        """The installed model a Hub name means (app.hub_name): of that repo, and of that
        quantization if the name gives one; None when none is installed (or the name is no
        Hub name at all)."""
        try:
            hub = parse_hub_name(name)
        except EmberError:
            return None
        for installed in (self._indexed, self.list):  # a miss looks again, as get's does
            for m in installed():
                if m.repo.lower() == hub.repo.lower() and (
                        not hub.quant or m.quant.lower() == hub.quant.lower()) and _complete(m):
                    return m
        return None

    # -- writing ---------------------------------------------------------------------------
    def target_path(self, spec: ModelSpec, variant: Variant) -> Path:
        hf = variant.source("hf")
        folder = Path(*hf.repo.split("/", 1)) if hf and hf.repo else Path("ember", spec.id)
        if variant.format in DIR_FORMATS:
            return self.inside_models(self.paths.models / folder)
        return self.inside_models(self.paths.models / folder / variant.file)

    def install(self, spec: ModelSpec, variant: Variant, verified_file: Path,
                projector: Path | None = None) -> InstalledModel:
        """Move a verified file into place (and its verified projector beside it, under the
        registry's name for it), then write its manifest."""
        target = self.target_path(spec, variant)
        info = read_gguf(verified_file)
        # a file verified against the hub's hash has no registry checksum: record its own
        digest = variant.sha256 or sha256_file(verified_file)
        model = InstalledModel(
            id=spec.id, quant=variant.quant, format=variant.format, path=target,
            size_bytes=verified_file.stat().st_size, sha256=digest,
            architecture=info.architecture, context_length=info.context_length,
            chat=spec.chat and info.chat_template is not None, origin="registry",
            installed_at=time.time(),
            projector_file=self._place_projector(variant, projector, target.parent))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(verified_file, target)
        self._write_manifest(model)
        return model

    def add_projector(self, model: InstalledModel, variant: Variant,
                      projector: Path | None) -> InstalledModel:
        """An installed model with the verified projector its variant names placed beside it
        and recorded in its manifest (a model installed before the registry named one)."""
        placed = self._place_projector(variant, projector, model.path.parent)
        if not placed:
            return model
        model = replace(model, projector_file=placed)
        self._write_manifest(model)
        return model

    def _place_projector(self, variant: Variant, projector: Path | None,
                         folder: Path) -> str:
        """A registry variant's verified projector moved into `folder` under the registry's
        name for it (kept if it is there already: another quantization brought it); the name
        the manifest records, "" for none."""
        if projector is None or variant.mmproj is None:
            return ""
        placed = self.inside_models(folder / Path(variant.mmproj.file).name)
        if projector.resolve() != placed.resolve():
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(projector, placed)
        return placed.name

    def import_gguf(self, source: str | Path,
                    projector: str | Path | None = None) -> InstalledModel:
        """Copy a user's GGUF into the store, named from its metadata, with its multimodal
        projector (`mmproj*.gguf`, for images and audio) beside it if one is given. The
        originals are kept."""
        source = Path(source).expanduser()
        info = read_gguf(source)
        proj_source = Path(projector).expanduser() if projector is not None else None
        if proj_source is not None:
            proj_info = read_gguf(proj_source)
            if proj_info.architecture != "clip":
                raise EmberError(f"{proj_source} is not a projector (its architecture is "
                                 f"{proj_info.architecture!r}, a projector's is 'clip')")
        model_id = slug(info.name)
        quant = info.file_type
        for m in self.list():
            if m.id == model_id and m.quant == quant:
                raise EmberError(f"{m.ref} is already installed ({m.path}); "
                                 f"`ember rm {m.ref}` first to replace it")
        target = self.inside_models(self.paths.models / "imported" / model_id / source.name)
        tmp = self.paths.partial / f"import-{os.getpid()}-{source.name}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, tmp)
            digest = sha256_file(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        projector_file = ""
        if proj_source is not None:
            name = proj_source.name if proj_source.name != source.name else f"mmproj-{source.name}"
            proj_target = self.inside_models(target.parent / name)
            try:
                shutil.copyfile(proj_source, tmp)
                os.replace(tmp, proj_target)
            finally:
                tmp.unlink(missing_ok=True)
            projector_file = proj_target.name
        model = InstalledModel(
            id=model_id, quant=quant, format="gguf", path=target,
            size_bytes=target.stat().st_size, sha256=digest, architecture=info.architecture,
            context_length=info.context_length, chat=info.chat_template is not None,
            origin="import", installed_at=time.time(), projector_file=projector_file)
        self._write_manifest(model)
        return model

    def install_directory(self, built: Path, model_id: str, quant: str, fmt: str,
                          architecture: str, context_length: int, chat: bool,
                          origin: str) -> InstalledModel:
        """Move a finished model directory (built under `partial/`) into
        `models/<origin>/<id>-<quant>/` and list it. An installed model of the same ref must be
        removed first."""
        for m in self.list():
            if m.id == model_id and m.quant == quant:
                raise EmberError(f"{m.ref} is already installed ({m.path}); "
                                 f"`ember rm {m.ref}` first to replace it")
        target = self.inside_models(self.paths.models / origin / f"{model_id}-{quant}".lower())
        if target.exists():
            raise EmberError(f"{target} exists but is not an installed model; remove it first")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(built, target)
        model = InstalledModel(
            id=model_id, quant=quant, format=fmt, path=target, size_bytes=dir_size(target),
            sha256=dir_sha256(target), architecture=architecture, context_length=context_length,
            chat=chat, origin=origin, installed_at=time.time())
        self._write_manifest(model)
        return model

    def install_snapshot(self, spec: ModelSpec, variant: Variant, folder: Path,
                         sha256: dict[str, str]) -> InstalledModel:
        """Move a downloaded and verified directory variant (`sha256`: its files' digests)
        to `models/<publisher>/<repo>/`. Whatever is at that place and is not an installed
        model (a damaged earlier install) is replaced, and only once the new one is in."""
        from backends.mlx_dir import read_config  # reads JSON only, no MLX

        config = read_config(folder)
        target = self.target_path(spec, variant)
        old = self.paths.partial / f"replaced-{os.getpid()}-{target.name}"
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(folder, target)
        except OSError:
            if old.exists():
                os.replace(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
        model = InstalledModel(
            id=spec.id, quant=variant.quant, format=variant.format, path=target,
            size_bytes=dir_size(target), sha256=dir_sha256(target, sha256),
            architecture=str(config["model_type"]),
            context_length=int(config.get("max_position_embeddings") or spec.context_max),
            chat=spec.chat and has_chat_template(target), origin="registry",
            installed_at=time.time())
        self._write_manifest(model)
        return model

    def hub_folder(self, repo: str) -> Path:
        """models/<owner>/<name>/ of a Hub repo."""
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name or ".." in (owner, name):
            raise EmberError(f"{repo!r} is not a Hub repo name (owner/name)")
        return self.inside_models(self.paths.models / owner / name)

    def installed_at(self, path: Path) -> InstalledModel | None:
        """The installed model that `path` is (a file of), if any."""
        for m in self.list():
            files = [m.path] if m.format in DIR_FORMATS else split_parts(m.path)
            if any(path == f or (f.is_dir() and path.is_relative_to(f)) for f in files):
                return m
        return None

    def _check_free(self, model_id: str, quant: str, repo: str) -> None:
        for m in self.list():
            if m.id == model_id and m.quant.lower() == quant.lower():
                what = f"from {m.repo}" if m.repo and m.repo != repo else "already"
                raise EmberError(f"{m.ref} is {what} installed ({m.path}); "
                                 f"`ember rm {m.ref}` first to replace it")

    def install_hub_gguf(self, folder: Path, parts: Sequence[str], projector: str | None,
                         sha256: dict[str, str], model_id: str, quant: str,
                         repo: str) -> InstalledModel:
        """A verified GGUF (one file, or a split GGUF's parts in order, as repo paths under
        `folder`) from a Hub repo into models/<owner>/<name>/, under their own file names,
        with the repo's vision projector beside them; then its manifest."""
        self._check_free(model_id, quant, repo)
        target_dir = self.hub_folder(repo)
        info = read_gguf(folder / parts[0])
        targets, digest = self._place_parts(folder, parts, sha256, target_dir)
        if projector is not None:
            proj = self.inside_models(target_dir / Path(projector).name)
            if not proj.exists():
                os.replace(folder / projector, proj)
        model = InstalledModel(
            id=model_id, quant=quant, format="gguf", path=targets[0],
            size_bytes=sum(t.stat().st_size for t in targets), sha256=digest,
            architecture=info.architecture, context_length=info.context_length,
            chat=info.chat_template is not None, origin="hub", installed_at=time.time(),
            repo=repo, projector_file=Path(projector).name if projector is not None else "")
        self._write_manifest(model)
        return model

    def install_split(self, spec: ModelSpec, variant: Variant, folder: Path,
                      sha256: dict[str, str], projector: Path | None = None) -> InstalledModel:
        """A registry split GGUF's verified parts (repo paths under `folder`, `sha256`: their
        digests) into the variant's folder under their own names; the manifest, beside the
        first part, comes last, so a half-moved set is never listed."""
        parts = [f.name for f in variant.files]
        info = read_gguf(folder / parts[0])
        place = self.target_path(spec, variant).parent
        targets, digest = self._place_parts(folder, parts, sha256, place)
        model = InstalledModel(
            id=spec.id, quant=variant.quant, format="gguf", path=targets[0],
            size_bytes=sum(t.stat().st_size for t in targets), sha256=digest,
            architecture=info.architecture, context_length=info.context_length,
            chat=spec.chat and info.chat_template is not None, origin="registry",
            installed_at=time.time(),
            projector_file=self._place_projector(variant, projector, place))
        self._write_manifest(model)
        return model

    def _place_parts(self, folder: Path, parts: Sequence[str], sha256: dict[str, str],
                     target_dir: Path) -> tuple[Sequence[Path], str]:  # `list` is Store.list here
        """A GGUF's verified parts (one file, or a split set in order) moved from `folder`
        into `target_dir` under their own file names; (their places, the model's digest: the
        file's SHA-256, or for a split set one over each part's name and SHA-256)."""
        targets = [self.inside_models(target_dir / Path(p).name) for p in parts]
        for target in targets:
            owner = self.installed_at(target)
            if owner is not None:
                raise EmberError(f"{target} is already installed as {owner.ref}")
        target_dir.mkdir(parents=True, exist_ok=True)
        for p, target in zip(parts, targets, strict=True):
            os.replace(folder / p, target)
        digest = (sha256.get(parts[0]) or sha256_file(targets[0])) if len(parts) == 1 else \
            hashlib.sha256("".join(f"{Path(p).name}\0{sha256.get(p) or sha256_file(t)}\n"
                                   for p, t in zip(parts, targets, strict=True))
                           .encode()).hexdigest()
        return targets, digest

    def install_hub_directory(self, folder: Path, sha256: dict[str, str], model_id: str,
                              quant: str, repo: str) -> InstalledModel:
        """A verified MLX or safetensors directory from a Hub repo into
        models/<owner>/<name>/ (loaded by the mlx backend, which reads both)."""
        from backends.mlx_dir import read_config  # reads JSON only, no MLX

        self._check_free(model_id, quant, repo)
        config = read_config(folder)
        target = self.hub_folder(repo)
        if target.exists():
            if any(target.glob(f"*{MANIFEST_SUFFIX}")):
                raise EmberError(f"{target} holds other installed models; remove them first")
            shutil.rmtree(target)  # what a damaged earlier install left: not a model
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, target)
        model = InstalledModel(
            id=model_id, quant=quant, format="mlx", path=target, size_bytes=dir_size(target),
            sha256=dir_sha256(target, sha256), architecture=str(config["model_type"]),
            context_length=int(config.get("max_position_embeddings") or 4096),
            chat=has_chat_template(target), origin="hub", installed_at=time.time(), repo=repo)
        self._write_manifest(model)
        return model

    def remove(self, name: str) -> InstalledModel:
        model = self.get(name)
        self.inside_models(model.path)  # list() checked it; a last check before deleting
        _manifest_path(model).unlink(missing_ok=True)  # unlisted first, then deleted
        self._touch()
        if model.path.is_dir():
            shutil.rmtree(model.path, ignore_errors=True)
        else:
            for part in split_parts(model.path):
                part.unlink(missing_ok=True)
            _remove_orphan_projectors(model)
        for folder in (model.path.parent, model.path.parent.parent):
            if folder.resolve() == self.paths.models.resolve():
                break
            try:
                folder.rmdir()  # only if empty
            except OSError:
                break
        return model

    def _write_manifest(self, model: InstalledModel) -> None:
        path = _manifest_path(model)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(model.to_json(), indent=2), encoding="utf-8")
        os.replace(tmp, path)
        self._touch()


def _remove_orphan_projectors(removed: InstalledModel) -> None:
    """The removed model's projector goes unless another model of its folder records it (the
    quantizations of one repo share one); any other mmproj*.gguf goes with the last model of
    the folder (what an older Ember's manifest did not record)."""
    folder = removed.path.parent
    others = []
    for manifest in folder.glob(f"*{MANIFEST_SUFFIX}"):
        try:
            others.append(json.loads(manifest.read_text(encoding="utf-8"))
                          .get("projector_file", ""))
        except (OSError, ValueError, AttributeError):
            others.append(None)  # unreadable: keep what it might use
    own = removed.projector
    if own is not None and removed.projector_file not in others and None not in others:
        own.unlink(missing_ok=True)
    if others:
        return
    for p in folder.glob("mmproj*.gguf"):
        p.unlink(missing_ok=True)


def _outside(path: Path, root: Path) -> bool:
    """Whether `path`, with `..` and symlinks resolved, is not below the folder `root`
    (itself resolved)."""
    resolved = path.resolve()
    return resolved == root or not resolved.is_relative_to(root)


def _beside(manifest: Path, fmt: str) -> Path:
    """The model a manifest describes: its folder (directory models), or the file it is named
    after."""
    if fmt in DIR_FORMATS:
        return manifest.parent
    return manifest.with_name(manifest.name.removesuffix(MANIFEST_SUFFIX))


def _manifest_path(model: InstalledModel) -> Path:
    if model.format in DIR_FORMATS:
        return model.path / DIR_MANIFEST
    return model.path.with_name(model.path.name + MANIFEST_SUFFIX)


def _complete(model: InstalledModel) -> bool:
    """The model's files are all there (a file of the recorded size, or a directory whose
    files add up to it)."""
    if model.format in DIR_FORMATS:
        return model.path.is_dir() and dir_size(model.path) == model.size_bytes
    parts = split_parts(model.path)
    return (all(p.is_file() for p in parts)
            and sum(p.stat().st_size for p in parts) == model.size_bytes)


def _dir_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not p.name.endswith(MANIFEST_SUFFIX))


def has_chat_template(folder: Path) -> bool:
    """Whether a model directory carries a chat template (tokenizer_config.json's, or the
    chat_template.jinja newer repos have)."""
    if (folder / "chat_template.jinja").is_file():
        return True
    try:
        tok_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(tok_config, dict) and bool(tok_config.get("chat_template"))


def dir_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in _dir_files(folder))


def dir_sha256(folder: Path, known: dict[str, str] | None = None) -> str:
    """One digest for a directory model: SHA-256 over each file's name and SHA-256 (`known`:
    digests already computed while verifying a download, by file name)."""
    h = hashlib.sha256()
    known = known or {}
    for p in _dir_files(folder):
        name = p.relative_to(folder).as_posix()
        h.update(f"{name}\0{known.get(name) or sha256_file(p)}\n".encode())
    return h.hexdigest()
