"""On "Your machine", for an NVIDIA GPU that llama.cpp drives through Vulkan: one button that
downloads llama.cpp's CUDA backend (`ember cuda install`: the module and NVIDIA's cuBLAS,
SHA-256 verified, app.gpu_module), with its progress, Cancel and Resume right there."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout

from app.config import Paths
from app.gpu_module.installed import InstalledModule
from app.gui.catalog_page import human_bytes, progress_text
from app.gui.tasks import CudaModuleTask
from app.pull.progress import Progress


class CudaModuleBox(QFrame):
    def __init__(self, home: Paths, through_vulkan: bool) -> None:
        super().__init__()
        self.setObjectName("card")
        self.home = home
        layout = QVBoxLayout(self)
        heading = QLabel("Faster on your NVIDIA GPU" if through_vulkan
                         else "Use your NVIDIA GPU")
        heading.setObjectName("heading")
        layout.addWidget(heading)
        now = ("GGUF models run on this GPU through Vulkan. llama.cpp's CUDA backend is "
               "usually faster on NVIDIA cards" if through_vulkan else
               "GGUF models run on the CPU: no Vulkan driver answered for this GPU. "
               "llama.cpp's CUDA backend runs them on it with the NVIDIA driver alone")
        about = QLabel(f"{now}; it is a separate download (the module and NVIDIA's cuBLAS, "
                       "about 0.5 GB), checked against its SHA-256 before it is installed.")
        about.setWordWrap(True)
        layout.addWidget(about)
        row = QHBoxLayout()
        self.button = QPushButton("Download the CUDA backend")
        self.button.clicked.connect(self._button)
        row.addWidget(self.button)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setVisible(False)
        row.addWidget(self.bar, 1)
        layout.addLayout(row)
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        self.detail.setVisible(False)
        layout.addWidget(self.detail)
        self.task: CudaModuleTask | None = None
        self.state = "idle"  # running | cancelled | failed | done

    def _button(self) -> None:
        if self.state == "running" and self.task is not None:
            self.task.cancel()
            self._say("cancelling…")
            return
        self.task = CudaModuleTask(self.home)
        self.task.progress.connect(self._progress)
        self.task.installed.connect(self._installed)
        self.task.failed.connect(self._failed)
        self.state = "running"
        self.button.setText("Cancel")
        self.bar.setVisible(True)
        self._say("starting…")
        self.task.start()

    def _say(self, text: str) -> None:
        self.detail.setVisible(True)
        self.detail.setText(text)

    def _progress(self, p: Progress) -> None:
        if p.total_bytes:
            self.bar.setValue(int(1000 * p.done_bytes / p.total_bytes))
        if p.phase != "done":
            self._say(progress_text(p))

    def _installed(self, done: InstalledModule) -> None:
        self.state = "done"
        self.bar.setValue(1000)
        self.button.setText("Installed")
        self.button.setEnabled(False)
        self._say(f"Installed and verified ({human_bytes(done.bytes_on_disk)} in "
                  f"{done.folder}). Models loaded from now on use it.")

    def _failed(self, message: str, cancelled: bool) -> None:
        self.state = "cancelled" if cancelled else "failed"
        self.button.setText("Resume" if cancelled else "Retry")
        self._say(message)
        self.detail.setToolTip(message)
