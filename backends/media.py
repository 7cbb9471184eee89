"""Images (and audio) in a conversation: what a message carries to a model that sees or hears.

A message's media travel as `Media` values in `Message.media`, and its `content` holds one
`MEDIA_MARKER` where each one goes, in order (llama.cpp's own convention: mtmd's default
marker, which `mtmd_tokenize` replaces with the model's image tokens, `<start_of_image>` and
the rest, so chat templates see plain text). Text from a user or a client never carries a
marker of its own: `plain_text` neutralizes one, so a typed "<__media__>" stays text.

Every image is decoded here, in the process that received it (Pillow, with limits on the
bytes and the pixels, so a decompression bomb or a broken file is a clear InvalidRequestError
and never reaches native code), and crosses to the worker as RGB pixels: llama.cpp's stb
image reader never sees bytes from a stranger. Formats: what `IMAGE_FORMATS` names (WebP
included, which stb cannot read). Images larger than `MAX_SIDE` on a side are scaled down
(mtmd resizes every image to the model's resolution anyway). `digest`, a SHA-256 of the
pixels, is what the prefix cache keys an image by: the same screenshot asked about twice
reuses its KV cache.

Audio (models whose projector hears): WAV, MP3 or FLAC bytes, checked by their magic here and
decoded in the worker by mtmd's helper (miniaudio), resampled to the model's rate.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import dataclass, field
from typing import Literal

from backends.errors import InvalidRequestError

MEDIA_MARKER = "<__media__>"  # mtmd_default_marker()

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # one encoded image (OpenAI's limit is 20 MB too)
MAX_AUDIO_BYTES = 25 * 1024 * 1024  # one audio clip (OpenAI's transcription limit)
MAX_IMAGE_PIXELS = 50_000_000  # decoded: more is a bomb or a scan no model reads
MAX_SIDE = 2048  # larger images are scaled down to this many pixels on their longer side
MAX_MEDIA_PER_REQUEST = 16

# Pillow's format names, and the media types clients send
IMAGE_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif",
                 "WEBP": "image/webp", "BMP": "image/bmp"}
AUDIO_FORMATS = ("wav", "mp3", "flac")

MediaKind = Literal["image", "audio"]


class MediaError(InvalidRequestError):
    """An image or audio clip that cannot be used, with the reason (a 400 on every API)."""


@dataclass(frozen=True, eq=False)
class Media:
    """One image (`data`: RGB pixels, `width` x `height` x 3 bytes) or audio clip (`data`:
    the encoded WAV/MP3/FLAC bytes). `digest`: SHA-256 of `data`, hex."""
    kind: MediaKind
    data: bytes
    width: int = 0
    height: int = 0
    digest: str = field(default="")
    source_format: str = ""  # "PNG", "JPEG", ..., or "wav", "mp3", "flac"

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", hashlib.sha256(self.data).hexdigest())

    def describe(self) -> str:
        if self.kind == "image":
            return f"{self.source_format or 'image'} {self.width}x{self.height}"
        return f"{self.source_format or 'audio'} clip"


def plain_text(text: str) -> str:
    """`text` with any media marker in it made harmless (a zero-width break inside it), so
    text from a client or a user never places an image."""
    return text.replace(MEDIA_MARKER, "<__media\u200b__>")


def count_markers(content: str) -> int:
    return content.count(MEDIA_MARKER)


def decode_image(raw: bytes, where: str = "image") -> Media:
    """Decodes an encoded image (PNG, JPEG, GIF's first frame, WebP, BMP) to RGB pixels,
    scaled down to MAX_SIDE; a MediaError names what is wrong and the limit it broke."""
    if not raw:
        raise MediaError(f"{where} is empty")
    if len(raw) > MAX_IMAGE_BYTES:
        raise MediaError(f"{where} is {len(raw) / 1e6:.1f} MB; the limit is "
                         f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB")
    from PIL import Image, UnidentifiedImageError

    formats = ", ".join(IMAGE_FORMATS)
    try:
        with Image.open(io.BytesIO(raw), formats=list(IMAGE_FORMATS)) as img:
            fmt = img.format or "?"
            w, h = img.size
            if w < 1 or h < 1:
                raise MediaError(f"{where} has no pixels ({w}x{h})")
            if w * h > MAX_IMAGE_PIXELS:
                raise MediaError(f"{where} is {w}x{h} pixels; the limit is "
                                 f"{MAX_IMAGE_PIXELS // 1_000_000} million pixels")
            img.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a smaller scale
            rgb = img.convert("RGB")
    except UnidentifiedImageError as e:
        raise MediaError(f"{where} is not an image Ember reads (formats: {formats})") from e
    except Image.DecompressionBombError as e:
        raise MediaError(f"{where} is too large to decode "
                         f"(limit {MAX_IMAGE_PIXELS // 1_000_000} million pixels)") from e
    except MediaError:
        raise
    except (OSError, ValueError, SyntaxError) as e:  # truncated or corrupt data
        raise MediaError(f"{where} is broken ({fmt_error(e)}); formats: {formats}") from e
    if max(rgb.size) > MAX_SIDE:
        rgb.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    return Media("image", rgb.tobytes(), rgb.width, rgb.height, source_format=fmt)


def fmt_error(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text[:160]


def audio_format(raw: bytes) -> str | None:
    """"wav", "mp3" or "flac" by the bytes' magic, else None."""
    if raw[:4] == b"RIFF" and raw[8:12] == b"WAVE":
        return "wav"
    if raw[:4] == b"fLaC":
        return "flac"
    if raw[:3] == b"ID3" or (len(raw) > 1 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def decode_audio(raw: bytes, where: str = "audio") -> Media:
    if not raw:
        raise MediaError(f"{where} is empty")
    if len(raw) > MAX_AUDIO_BYTES:
        raise MediaError(f"{where} is {len(raw) / 1e6:.1f} MB; the limit is "
                         f"{MAX_AUDIO_BYTES // (1024 * 1024)} MB")
    fmt = audio_format(raw)
    if fmt is None:
        raise MediaError(f"{where} is not audio Ember reads (formats: "
                         f"{', '.join(AUDIO_FORMATS)})")
    return Media("audio", raw, source_format=fmt)


DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,",
                      re.IGNORECASE)


def decode_base64(text: str, where: str) -> bytes:
    """Base64 (standard or URL-safe, whitespace allowed) to bytes, or a MediaError."""
    if len(text) > MAX_IMAGE_BYTES * 4 // 3 + 1024:
        raise MediaError(f"{where} is over {MAX_IMAGE_BYTES // (1024 * 1024)} MB")
    cleaned = re.sub(r"\s+", "", text)
    try:
        if "-" in cleaned or "_" in cleaned:
            return base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
        return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError(f"{where} is not valid base64 ({e})") from e


def from_data_url(url: str, where: str) -> bytes:
    """The bytes of a `data:<type>;base64,...` URL, or a MediaError saying what it takes."""
    match = DATA_URL.match(url)
    if not match:
        raise MediaError(f"{where} must be a base64 data URL (data:image/png;base64,...)"
                         f" or an http(s) URL")
    return decode_base64(url[match.end():], where)


def image_tokens_note(media: tuple[Media, ...]) -> str:
    """"2 images" and the like, for messages that name what a request holds."""
    images = sum(1 for m in media if m.kind == "image")
    audio = len(media) - images
    parts = []
    if images:
        parts.append(f"{images} image{'s' if images != 1 else ''}")
    if audio:
        parts.append(f"{audio} audio clip{'s' if audio != 1 else ''}")
    return " and ".join(parts)


def encoded(item: Media) -> tuple[str, bytes]:
    """`item` as a file a server reads: an image as PNG (its pixels, losslessly), a clip as
    the bytes it came as; with its format name ("png", "wav", "mp3", "flac")."""
    if item.kind == "audio":
        return item.source_format or "wav", item.data
    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (item.width, item.height), item.data).save(out, "PNG")
    return "png", out.getvalue()


def openai_parts(content: str, media: tuple[Media, ...]) -> list[dict]:
    """A message's content with its media as OpenAI chat content parts, in order: text
    parts, `image_url` parts with PNG data URLs, `input_audio` parts (what llama-server,
    vLLM, LM Studio and Ember's own server read)."""
    pieces = content.split(MEDIA_MARKER)
    parts: list[dict] = []
    for i, text in enumerate(pieces):
        if text:
            parts.append({"type": "text", "text": text})
        if i < len(media):
            fmt, raw = encoded(media[i])
            data = base64.b64encode(raw).decode("ascii")
            if media[i].kind == "image":
                parts.append({"type": "image_url",
                              "image_url": {"url": f"data:image/{fmt};base64,{data}"}})
            else:
                parts.append({"type": "input_audio",
                              "input_audio": {"data": data, "format": fmt}})
    return parts
