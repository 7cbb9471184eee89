"""Images and audio clips for the API tests, made in the test (Pillow), in the shapes the
wires carry them (base64, data URLs), and the bad inputs every dialect must answer with a 400."""

from __future__ import annotations

import base64
import io
import struct

from PIL import Image


def png(width: int = 8, height: int = 8, color: tuple[int, int, int] = (200, 30, 30),
        mode: str = "RGB", fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height), color if mode == "RGB" else 0).save(out, fmt)
    return out.getvalue()


def wav(samples: int = 160, rate: int = 16000) -> bytes:
    """A mono 16-bit PCM WAV of silence."""
    data = b"\0\0" * samples
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" + b"fmt "
            + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def data_url(raw: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{b64(raw)}"


def noise(width: int = 64, height: int = 64) -> bytes:
    """A PNG of varied pixels (its compressed data is long enough to cut)."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height),
                    bytes((i * 37) % 251 for i in range(width * height * 3))).save(out, "PNG")
    return out.getvalue()


RED, BLUE = png(color=(220, 20, 20)), png(color=(20, 20, 220))
# a PNG cut in its pixel data: Pillow reads the header and the size, then fails to decode
BROKEN = noise()[:-200]
NOT_AN_IMAGE = b"%PDF-1.7 this is a document, not an image" * 4
# 8000 x 7000 pixels (56 million) of one bit each: a small file that decodes to too much
BOMB = png(8000, 7000, mode="1")
TIFF = png(fmt="TIFF")  # an image Pillow reads, in a format Ember does not take
FORMATS = "formats: PNG, JPEG, GIF, WEBP, BMP"

# (bytes, words in the 400) for each bad image, the same on every dialect
BAD_IMAGES = [
    (BROKEN, "is broken"),
    (NOT_AN_IMAGE, f"is not an image Ember reads ({FORMATS})"),
    (BOMB, "is 8000x7000 pixels; the limit is 50 million pixels"),
    (TIFF, f"is not an image Ember reads ({FORMATS})"),
]
