"""Images (and audio) a user attaches to a question: read from a file or taken as bytes (a
paste), decoded here with backends.media's limits, so a broken or huge file is a clear
MediaError before anything is stored or sent; and which installed models can take them (a
projector beside the model, app.store).

An attachment keeps the bytes as given: history.db's files are those (app.history), and a
request decodes them again (`decode_stored`), so an answer after a restart, a retry or an
edit gives the model the same pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.store import Store
from backends.errors import EmberError
from backends.media import Media, MediaError, audio_format, decode_audio, decode_image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
AUDIO_SUFFIXES = (".wav", ".mp3", ".flac")
# The context meter's guess for an image before a backend has counted it: 256 is what
# Gemma 3's projector gives every image (mm_tokens_per_image), and what Qwen2.5-VL gives a
# 448x448 one (32x32 patches of 14 px, merged 2x2); the engine's count replaces it
# (Runtime.count_prompt_tokens, by the engine's owner).
IMAGE_TOKENS_ESTIMATE = 256


@dataclass(frozen=True, eq=False)
class Attachment:
    """One image or clip for the next question: its bytes as given, and decoded."""
    name: str  # shown on its chip: the file's name, or "pasted image"
    data: bytes
    media: Media

    @property
    def kind(self) -> str:
        return self.media.kind

    @property
    def ext(self) -> str:
        """The stored file's suffix, from what the bytes are (not the name they came by)."""
        fmt = self.media.source_format.lower()
        return {"jpeg": "jpg"}.get(fmt, fmt) or ("png" if self.kind == "image" else "wav")


def decode_stored(kind: str, data: bytes, where: str) -> Media:
    """An image's or clip's bytes as Media; a MediaError says what is wrong with them."""
    return decode_audio(data, where) if kind == "audio" else decode_image(data, where)


def attachment_from_bytes(data: bytes, name: str = "pasted image") -> Attachment:
    """Audio (WAV, MP3, FLAC by their magic) or else an image; MediaError if neither."""
    kind = "audio" if audio_format(data) is not None else "image"
    return Attachment(name, data, decode_stored(kind, data, name))


def attachment_from_file(path: Path) -> Attachment:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise MediaError(f"cannot read {path.name}: {e.strerror or e}") from e
    return attachment_from_bytes(data, path.name)


def estimated_tokens(attachments: tuple[Attachment, ...] | list[Attachment]) -> int:
    return IMAGE_TOKENS_ESTIMATE * sum(1 for a in attachments if a.kind == "image")


def seeing_models(store: Store) -> list[str]:
    """The installed models that can take images (a projector beside them), by ref."""
    return [m.ref for m in store.list() if m.projector is not None]


def model_sees(store: Store, model: str) -> bool | None:
    """Whether `model` (installed) has a projector; None: it is not installed here."""
    try:
        return store.get(model).projector is not None
    except EmberError:
        return None


def cannot_see_text(model: str, seeing: list[str], remote: bool = False) -> str:
    """What the front end says when an image is for a model that cannot take it."""
    why = (f"{model} is a remote model whose server does not list vision for it." if remote
           else f"{model} cannot see images (it has no vision projector).")
    if seeing:
        return f"{why} Installed models that can: {', '.join(seeing)}."
    return (f"{why} No installed model can: download a vision model (Gemma 3 4B, for one) "
            "from the Models page or with `ember pull`.")
