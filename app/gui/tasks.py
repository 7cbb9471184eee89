"""Work that must never run on the UI thread: what a model offers, the Hub, downloading,
serving (a chat turn is app.gui.turn_task's).

Each task runs in a plain Python thread and reports through Qt signals; the signals'
receivers live on the UI thread, so Qt queues every emission to it.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time

from PySide6.QtCore import Signal

from app.config import Paths
from app.gui.thread_task import ThreadTask
from app.hardware import HardwareProfile
from app.pull.progress import Cancelled, Progress
from app.runtime import Runtime
from app.runtime.thinking import ThinkingSupport
from app.store import Store
from backends.errors import EmberError

log = logging.getLogger(__name__)


class ThinkingSupportTask(ThreadTask):
    """What the Think control offers for a model: reads its template, or asks its server."""
    thread_name = "ember-gui-think"
    found = Signal(str, object)  # model ref, app.runtime.thinking.ThinkingSupport

    def __init__(self, runtime: Runtime, model: str) -> None:
        super().__init__()
        self.runtime, self.model = runtime, model

    def _run(self) -> None:
        try:
            support = self.runtime.thinking_support(self.model)
        except EmberError:  # an unknown or unreachable model: no control, the answer says why
            support = ThinkingSupport()
        except Exception:  # e.g. a remote client closed under it (its endpoint was edited)
            log.warning("asking what %s thinks failed", self.model, exc_info=True)
            support = ThinkingSupport()
        self.found.emit(self.model, support)


class RemoteModelsTask(ThreadTask):
    """Ask every remote endpoint in config.toml for its models (network: off the UI thread)."""
    thread_name = "ember-gui-remotes"
    listed = Signal(list, dict)  # [RemoteModel], {endpoint: why it could not list}

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime

    def _run(self) -> None:
        try:
            found, failed = self.runtime.remote_models()
        except EmberError as e:  # config.toml itself is broken
            found, failed = [], {"config.toml": str(e)}
        except Exception as e:  # a bug must not leave the list unanswered
            log.warning("listing the remote models failed", exc_info=True)
            found, failed = [], {"remote servers": f"{type(e).__name__}: {e}"}
        self.listed.emit(found, failed)


class HubSearchTask(ThreadTask):
    """Search the Hugging Face Hub (network: off the UI thread)."""
    thread_name = "ember-gui-hub-search"
    found = Signal(str, list)  # the query, [app.pull.hf_search.HubRepo]
    failed = Signal(str, str)  # the query, why

    def __init__(self, query: str, fmt: str | None) -> None:
        super().__init__()
        self.query, self.fmt = query, fmt

    def _run(self) -> None:
        from app.pull.hf_search import search

        try:
            repos = search(self.query, self.fmt)
        except EmberError as e:
            self.failed.emit(self.query, str(e))
        except Exception as e:  # a bug must not leave the search unanswered
            log.warning("searching the Hub for %r failed", self.query, exc_info=True)
            self.failed.emit(self.query, f"{type(e).__name__}: {e}")
        else:
            self.found.emit(self.query, repos)


class HubFilesTask(ThreadTask):
    """A Hub repo's quantizations with their fit here, from the files' headers (Range
    requests, no weights)."""
    thread_name = "ember-gui-hub-files"
    listed = Signal(str, object, list, str)  # repo, RepoListing, [QuantFit], recommended quant
    failed = Signal(str, str)  # repo, why

    def __init__(self, repo: str, hardware: HardwareProfile) -> None:
        super().__init__()
        self.repo, self.hardware = repo, hardware

    def _run(self) -> None:
        from app.pull.hf_fit import fit_repo, recommended
        from app.pull.hf_repo import list_quants

        try:
            listing = list_quants(self.repo)
            fits = fit_repo(listing, self.hardware)
            best = recommended(fits, self.hardware)
        except EmberError as e:
            self.failed.emit(self.repo, str(e))
        except Exception as e:
            log.warning("listing the Hub repo %s failed", self.repo, exc_info=True)
            self.failed.emit(self.repo, f"{type(e).__name__}: {e}")
        else:
            self.listed.emit(self.repo, listing, fits, best.quant.name if best else "")


class _InstallTask(ThreadTask):
    """A download that installs something, with progress; cancel keeps what was downloaded
    for a later resume. `_install` does the work and returns what `installed` carries."""
    progress = Signal(object)  # app.pull.progress.Progress
    installed = Signal(object)  # what was installed
    failed = Signal(str, bool)  # message, cancelled
    cancelled_text = "cancelled: what was downloaded is kept, Resume continues it"

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def _report(self, p: Progress) -> None:
        self.progress.emit(p)

    def _install(self) -> object:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            done = self._install()
        except Cancelled:
            self.failed.emit(self.cancelled_text, True)
        except EmberError as e:
            self.failed.emit(str(e), False)
        except Exception as e:
            self.failed.emit(f"{type(e).__name__}: {e}", False)
        else:
            self.installed.emit(done)


class DownloadTask(_InstallTask):
    """`ember pull REF` with progress (`installed`: the app.store.InstalledModel)."""
    thread_name = "ember-gui-pull"
    cancelled_text = "cancelled: the partial download is kept, Resume continues it"

    def __init__(self, ref: str, store: Store, hardware=None) -> None:
        super().__init__()
        self.ref, self.store, self.hardware = ref, store, hardware

    def _install(self) -> object:
        from app.pull.install import pull

        return pull(self.ref, store=self.store, on_progress=self._report,
                    cancel=self._cancel, hw=self.hardware)


class CudaModuleTask(_InstallTask):
    """`ember cuda install` with progress: llama.cpp's CUDA module and NVIDIA's runtime
    libraries into the data folder (`installed`: the app.gpu_module.installed.InstalledModule)."""
    thread_name = "ember-gui-cuda-module"

    def __init__(self, home: Paths) -> None:
        super().__init__()
        self.home = home

    def _install(self) -> object:
        from app.gpu_module.install import install, read_source

        return install(self.home, read_source(None), self._report, self._cancel)


class ServerTask(ThreadTask):
    """Ember's HTTP API, sharing the window's Runtime, on a thread of its own."""
    thread_name = "ember-gui-serve"
    started = Signal(str, str)  # url, key
    stopped = Signal(str)  # why ("" when asked to stop)

    def __init__(self, runtime: Runtime, host: str = "127.0.0.1", port: int = 11435) -> None:
        super().__init__()
        self.runtime, self.host, self.port = runtime, host, port
        self.key = secrets.token_urlsafe(24)
        self._server = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            import uvicorn

            from app.server.app import ServerSettings, create_app
            from app.server.web_walls import origins_from_env
        except ImportError as e:
            from app.install_hint import needs_extra

            self.stopped.emit(needs_extra("the API server", "serve", e.name))
            return
        settings = ServerSettings(host=self.host, port=self.port, api_key=self.key,
                                  cors_origins=origins_from_env(), owns_runtime=False)
        # log_config=None: uvicorn logs through Ember's handlers (app.logs) instead of
        # replacing them with its own
        config = uvicorn.Config(create_app(self.runtime, settings), host=self.host,
                                port=self.port, log_level="warning", lifespan="on",
                                log_config=None)
        self._server = uvicorn.Server(config)
        threading.Thread(target=self._announce, daemon=True).start()
        try:
            self._server.run()
        except SystemExit:  # uvicorn exits when it cannot bind
            pass
        except Exception as e:
            self.stopped.emit(f"{type(e).__name__}: {e}")
            return
        self.stopped.emit("" if self._server.started else
                          f"could not listen on {self.host}:{self.port} (is the port in use?)")

    def _announce(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._thread.is_alive():
            if self._server is not None and self._server.started:
                self.started.emit(self.url, self.key)
                return
            time.sleep(0.05)
