"""Images and audio on every API dialect -> `Message.media` (backends.media): what the four
dialects' inbound modules share. An image comes inline (base64, or a `data:` URL) or, only
when `ember serve` was started to fetch them (ServerSettings.media_urls), as an http(s) URL
(app.server.media_fetch). Each is decoded here with backends.media's limits; a problem is a
MediaError (a 400 in the dialect's shape) whose `param` is the wire path of the part.

A message's content is built by `Parts`: client text goes through `plain_text` (a literal
"<__media__>" a client sends stays text), and each image or clip places one MEDIA_MARKER
where it stands. Decoding and fetching block, so the dialects' routes convert a request's
conversation in a worker thread (`off_loop`), never on the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio

from app.server.media_fetch import fetch_image
from app.server.settings import ServerSettings
from backends.base import Message
from backends.media import (
    AUDIO_FORMATS,
    IMAGE_FORMATS,
    MAX_MEDIA_PER_REQUEST,
    MEDIA_MARKER,
    Media,
    MediaError,
    decode_audio,
    decode_base64,
    decode_image,
    fmt_error,
    from_data_url,
    plain_text,
)

T = TypeVar("T")
MEDIA_ROLES = ("user", "tool")  # where an image or a clip may stand (a tool's screenshot)
URL_OPTION = "--allow-media-urls"
PRIVATE_URL_OPTION = "--allow-private-media-urls"


@contextmanager
def at(where: str) -> Iterator[None]:
    """A MediaError raised inside names `where` as its param, if it names none."""
    try:
        yield
    except MediaError as e:
        if e.param is None:
            e.param = where
        raise


@dataclass
class MediaSource:
    """How one request's images and clips are read: inline always, http(s) URLs only when the
    server fetches them (`fetch_urls`; `private_urls`: also from this machine's network).
    One per request: it counts what the request holds, so a request with more than
    MAX_MEDIA_PER_REQUEST is refused before the rest are decoded."""
    fetch_urls: bool = False
    private_urls: bool = False
    taken: int = field(default=0, init=False)

    @classmethod
    def of(cls, settings: ServerSettings) -> MediaSource:
        return cls(settings.media_urls, settings.media_urls_private)

    def _take(self, where: str) -> None:
        self.taken += 1
        if self.taken > MAX_MEDIA_PER_REQUEST:
            raise MediaError(f"{where}: the request holds more than {MAX_MEDIA_PER_REQUEST} "
                             "images or audio clips, the limit per request", where)

    def image_url(self, url: str, where: str) -> Media:
        """A `data:image/...;base64,` URL, or an http(s) URL when the server fetches them."""
        self._take(where)
        with at(where):
            scheme = url[:8].lower()
            if scheme.startswith(("http://", "https://")):
                if not self.fetch_urls:
                    raise MediaError(
                        f"{where}: this server does not fetch image URLs (a request would "
                        "make it reach into your network): send the image inline as a "
                        f"base64 data URL (data:image/png;base64,...), or start `ember serve "
                        f"{URL_OPTION}`", where)
                raw = fetch_image(url, where, allow_private=self.private_urls)
            else:
                raw = from_data_url(url, where)
            return _decoded(raw, where)

    def image_base64(self, data: str, where: str, media_type: str | None = None) -> Media:
        """Base64 image bytes; `media_type`, when the wire has one, must be an image type
        Ember reads (the bytes decide the format: a PNG sent as image/jpeg is read)."""
        self._take(where)
        with at(where):
            if media_type is not None and media_type.lower() not in IMAGE_FORMATS.values():
                raise MediaError(f"{where}: media_type {media_type[:60]!r} is not an image "
                                 f"type Ember reads ({', '.join(IMAGE_FORMATS.values())})",
                                 where)
            return _decoded(decode_base64(data, where), where)

    def audio_base64(self, data: str, where: str, fmt: str | None = None) -> Media:
        """Base64 audio (WAV, MP3 or FLAC by its bytes); `fmt` as the wire names it."""
        self._take(where)
        with at(where):
            if fmt is not None and fmt.lower() not in AUDIO_FORMATS:
                raise MediaError(f"{where}: audio format {fmt[:40]!r} is not one Ember reads "
                                 f"({', '.join(AUDIO_FORMATS)})", where)
            return decode_audio(decode_base64(data, where), where)


def _decoded(raw: bytes, where: str) -> Media:
    """decode_image, with any error of Pillow's it does not name (a plugin's IndexError or
    struct.error on a crafted file) a 400 too: these bytes are a stranger's, and a request
    that breaks a decoder is still a bad request, never a 500."""
    try:
        return decode_image(raw, where)
    except MediaError:
        raise
    except Exception as e:  # the boundary to hostile bytes: any decoder failure is theirs
        raise MediaError(f"{where} is broken ({fmt_error(e)}); formats: "
                         f"{', '.join(IMAGE_FORMATS)}", where) from e


class Parts:
    """One message's content as it is read: text pieces made plain, and a marker for each
    image or clip where it stands, joined by `separator`."""

    def __init__(self, separator: str = "") -> None:
        self.separator = separator
        self.pieces: list[str] = []
        self.media: list[Media] = []

    def text(self, text: str) -> None:
        self.pieces.append(plain_text(text))

    def add(self, media: Media) -> None:
        self.pieces.append(MEDIA_MARKER)
        self.media.append(media)

    @property
    def content(self) -> str:
        return self.separator.join(self.pieces)

    def check_role(self, role: str, where: str) -> None:
        if self.media and role not in MEDIA_ROLES:
            raise MediaError(f"{where}: images and audio go in user turns (or tool results), "
                             f"not in a {role} turn", where)

    def message(self, role: str, where: str, *, tool_call_id: str | None = None,
                name: str | None = None) -> Message:
        self.check_role(role, where)
        return Message(role, self.content, tool_call_id=tool_call_id, name=name,
                       media=tuple(self.media))


def with_markers(text: str, media: list[Media]) -> str:
    """Ollama's placement: the images' markers before the (plain) text, as Ollama puts a
    message's images in front of its content."""
    return MEDIA_MARKER * len(media) + plain_text(text)


async def off_loop(work: Callable[..., T], *args: object) -> T:
    """`work(*args)` in a worker thread: decoding images and fetching URLs block."""
    return await anyio.to_thread.run_sync(functools.partial(work, *args))
