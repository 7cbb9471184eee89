"""packaging/icons.py makes every icon file from the SVG: right sizes, files that open, and a
16 px icon that still shows the flame."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtGui import QImage, QImageReader

from app.identity import APP_ID, ICON_SVG
from tests.support import REPO

PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = {16, 24, 32, 48, 64, 128, 256}


@pytest.fixture(scope="module")
def icons(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("icons")
    subprocess.run([sys.executable, str(REPO / "packaging" / "icons.py"), str(out)],
                   check=True, capture_output=True, timeout=120)
    return out


@pytest.mark.parametrize("size", PNG_SIZES)
def test_each_hicolor_png_has_its_size(icons: Path, size: int):
    image = QImage(str(icons / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"))
    assert not image.isNull() and (image.width(), image.height()) == (size, size)
    assert image.hasAlphaChannel()  # the rounded tile's corners are transparent
    assert image.pixelColor(0, 0).alpha() == 0


def test_the_scalable_icon_is_the_svg_itself(icons: Path):
    svg = icons / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    assert svg.read_bytes() == ICON_SVG.read_bytes()


def test_the_ico_holds_every_size_from_16_to_256(icons: Path):
    with Image.open(icons / "ember.ico") as ico:
        assert set(ico.ico.sizes()) == {(n, n) for n in ICO_SIZES}
    reader = QImageReader(str(icons / "ember.ico"))  # and Qt, a second reader, agrees
    widths = set()
    for i in range(reader.imageCount()):
        reader.jumpToImage(i)
        widths.add(reader.read().width())
    assert widths == ICO_SIZES


def test_the_icns_parses_and_holds_16_to_512_at_1x_and_2x(icons: Path):
    data = (icons / "ember.icns").read_bytes()
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    types, at = [], 8
    while at < len(data):  # every entry's length lands exactly on the next one
        kind, length = data[at:at + 4], struct.unpack(">I", data[at + 4:at + 8])[0]
        assert length > 8
        types.append(kind.decode())
        at += length
    assert at == len(data)
    # ic07-ic10: 128, 256, 512, 512@2x; ic11-ic14: 16@2x, 32@2x, 128@2x, 256@2x
    assert {"ic07", "ic08", "ic09", "ic10", "ic11", "ic12", "ic13", "ic14"} <= set(types)
    with Image.open(icons / "ember.icns") as icns:
        assert {(16, 16, 2), (32, 32, 2), (128, 128, 1), (256, 256, 1), (512, 512, 1),
                (512, 512, 2)} <= set(icns.info["sizes"])
        icns.load()
        assert icns.size == (1024, 1024)


def test_the_16_px_icon_shows_a_flame_on_a_dark_tile(icons: Path):
    image = QImage(str(icons / "hicolor" / "16x16" / "apps" / f"{APP_ID}.png"))
    pixels = [image.pixelColor(x, y) for x in range(16) for y in range(16)]
    opaque = [c for c in pixels if c.alpha() > 200]
    flame = [c for c in opaque if c.red() > 200 and c.red() - c.blue() > 80]
    tile = [c for c in opaque if c.lightness() < 70]
    assert len(opaque) > 180  # the tile fills most of it
    assert len(flame) >= 20 and len(tile) >= 60  # both the flame and its background show
