"""Make every icon file the platforms need from assets/icon/ember.svg, at build time.

    python packaging/icons.py OUT

writes
    OUT/hicolor/<n>x<n>/apps/<APP_ID>.png   n = 16, 24, 32, 48, 64, 128, 256, 512
    OUT/hicolor/scalable/apps/<APP_ID>.svg  the source itself
    OUT/ember.ico                           Windows: 16 to 256 in one file
    OUT/ember.icns                          macOS: 32 to 512, and Retina 16@2x to 512@2x

Each size is rendered from the SVG by QtSvg at that size (not scaled down from a big bitmap,
which blurs the 16 px one). Qt writes the PNGs; the ICO and ICNS containers come from Pillow
because Qt's own ico and icns writers (PySide6 6.12's imageformats plugins) write ONE image
per file: a 256-only .ico makes Windows shrink it for the taskbar and the title bar, and a
512-only .icns lacks the small sizes Finder's lists use.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from PIL import Image
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QImage, QImageWriter, QPainter
from PySide6.QtSvg import QSvgRenderer

from app.identity import APP_ID, ICON_SVG

PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)  # 256 is the ICO format's largest
# the sizes Pillow's ICNS writer stores (ic07-ic14); it writes no 16 px 1x entry (icp4), so
# a 16 px place shows the 32 px (16@2x) image scaled down
ICNS_SIZES = (32, 64, 128, 256, 512, 1024)


def render(svg: Path, size: int) -> QImage:
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg}: not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QImageWriter(buffer, QByteArray(b"png"))
    if not writer.write(image):
        raise OSError(f"Qt could not encode a PNG: {writer.errorString()}")
    return bytes(data.data())


def make_icons(out: Path, svg: Path = ICON_SVG) -> dict[str, Path]:
    """Write every icon under `out`; returns what was written by kind ("png16", "ico", ...)."""
    sizes = sorted(set(PNG_SIZES) | set(ICO_SIZES) | set(ICNS_SIZES))
    pngs = {n: png_bytes(render(svg, n)) for n in sizes}
    written: dict[str, Path] = {}
    for n in PNG_SIZES:
        path = out / "hicolor" / f"{n}x{n}" / "apps" / f"{APP_ID}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pngs[n])
        written[f"png{n}"] = path
    scalable = out / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(svg, scalable)
    written["svg"] = scalable
    images = {n: Image.open(io.BytesIO(pngs[n])) for n in sizes}
    # Pillow takes the largest image and, for each size asked, the appended image of exactly
    # that size when there is one (else it would scale the largest down)
    largest = max(ICO_SIZES)
    written["ico"] = out / "ember.ico"
    images[largest].save(written["ico"], format="ICO", sizes=[(n, n) for n in ICO_SIZES],
                         append_images=[images[n] for n in ICO_SIZES if n != largest])
    largest = max(ICNS_SIZES)
    written["icns"] = out / "ember.icns"
    images[largest].save(written["icns"], format="ICNS",
                         append_images=[images[n] for n in ICNS_SIZES if n != largest])
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the icons into")
    parser.add_argument("--svg", type=Path, default=ICON_SVG)
    args = parser.parse_args(argv)
    for kind, path in make_icons(args.out, args.svg).items():
        print(f"{kind:6} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
