"""The images waiting to go with the next question, as chips with a thumbnail above the
composer (like the documents' chips), what a paste or a drop carries, and the thumbnails a
question's bubble shows.

Thumbnails are QPixmaps drawn in QLabels, not HTML: a message's text is rendered with
nothing loaded (app.gui.chat_view.MessageText.loadResource), and the images stay outside it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMimeData, Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

from app.chat.attachments import AUDIO_SUFFIXES, IMAGE_SUFFIXES, Attachment

CHIP_THUMB_PX = 40  # a chip's thumbnail, its longer side
BUBBLE_MAX_PX = 320  # a sent image in its bubble: at most this wide (and tall)


def is_media_file(path: Path) -> bool:
    """Whether a dropped or chosen file goes with the question (an image or clip), not to
    the chat's documents."""
    return path.suffix.lower() in IMAGE_SUFFIXES + AUDIO_SUFFIXES


def images_filter() -> str:
    patterns = " ".join(f"*{s}" for s in IMAGE_SUFFIXES)
    return f"Images ({patterns})"


def clipboard_png(mime: QMimeData) -> bytes | None:
    """A pasted image (a screenshot tool's, a browser's "Copy image") as PNG bytes."""
    if not mime.hasImage():
        return None
    image = mime.imageData()
    if not isinstance(image, QImage):
        image = QImage(image) if image is not None else QImage()
    if image.isNull():
        return None
    return png_bytes(image)


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def thumbnail(data: bytes, side: int) -> QPixmap:
    """`data` (encoded image bytes) scaled down to fit `side` x `side`; a null pixmap for
    bytes Qt cannot read (the chip then shows the name alone)."""
    image = QImage.fromData(data)
    if image.isNull():
        return QPixmap()
    if image.width() > side or image.height() > side:
        image = image.scaled(side, side, Qt.AspectRatioMode.KeepAspectRatio,
                             Qt.TransformationMode.SmoothTransformation)
    return QPixmap.fromImage(image)


class ImageChip(QFrame):
    remove_requested = Signal(object)  # the Attachment

    def __init__(self, attachment: Attachment) -> None:
        super().__init__()
        self.setObjectName("image-chip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.attachment = attachment
        row = QHBoxLayout(self)
        row.setContentsMargins(2, 1, 2, 1)
        row.setSpacing(4)
        self.thumb = QLabel()
        self.thumb.setObjectName("thumbnail")
        if attachment.kind == "image":
            self.thumb.setPixmap(thumbnail(attachment.data, CHIP_THUMB_PX))
        row.addWidget(self.thumb)
        self.label = QLabel(f"{attachment.name} · {attachment.media.describe()}")
        self.label.setToolTip("Sent with your next message")
        row.addWidget(self.label)
        self.remove = QToolButton()
        self.remove.setText("×")
        self.remove.setAutoRaise(True)
        self.remove.setToolTip(f"Remove {attachment.name}")
        self.remove.clicked.connect(lambda: self.remove_requested.emit(attachment))
        row.addWidget(self.remove)


class ImageChips(QWidget):
    """One chip per image for the next question; hidden when there is none."""
    changed = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("image-chips")
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)
        self.chips: list[ImageChip] = []
        self.hide()

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        return tuple(c.attachment for c in self.chips)

    def add(self, attachment: Attachment) -> None:
        chip = ImageChip(attachment)
        chip.remove_requested.connect(self._remove)
        self.row.insertWidget(self.row.count() - 1, chip)
        self.chips.append(chip)
        self.show()
        self.changed.emit()

    def _remove(self, attachment: Attachment) -> None:
        for chip in [c for c in self.chips if c.attachment is attachment]:
            self._drop(chip)
        self.setVisible(bool(self.chips))
        self.changed.emit()

    def _drop(self, chip: ImageChip) -> None:
        self.row.removeWidget(chip)
        chip.hide()
        chip.deleteLater()
        self.chips.remove(chip)

    def clear(self) -> None:
        for chip in list(self.chips):
            self._drop(chip)
        self.hide()
        self.changed.emit()


class BubbleImages(QWidget):
    """A question's images in its bubble, each at most BUBBLE_MAX_PX on a side."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("bubble-images")
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)
        self.labels: list[QLabel] = []
        self.hide()

    def set_images(self, images: list[tuple[str, bytes]]) -> None:
        """(a name for its tooltip, encoded bytes) per image; unreadable ones show their
        name."""
        for label in self.labels:
            self.row.removeWidget(label)
            label.deleteLater()
        self.labels = []
        for name, data in images:
            label = QLabel()
            label.setObjectName("bubble-image")
            pixmap = thumbnail(data, BUBBLE_MAX_PX)
            if pixmap.isNull():
                label.setText(f"[{name}]")
            else:
                label.setPixmap(pixmap)
            label.setToolTip(name)
            self.row.insertWidget(self.row.count() - 1, label)
            self.labels.append(label)
        self.setVisible(bool(self.labels))
