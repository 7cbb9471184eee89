"""The window joins a running Ember service (issue 43), model-free: a keyed `ember serve` on
an empty data folder, found through the folder's endpoint and key files. The Server page says
which runtime is in use, and when the service is gone for good a new chat falls back to
in-process models, saying so."""

from __future__ import annotations

from pathlib import Path

from app.config import Paths
from app.gui import build_window
from app.runtime.runtime import Runtime
from app.runtime.service_runtime import ServiceRuntime
from app.service.endpoint import write_endpoint, write_key
from app.store import Store
from tests.support.live_server import free_port, live_server
from tests.support.machines import desktop

KEY = "window-service-key"


def test_the_window_uses_the_service_and_falls_back_when_it_is_gone(qtbot, tmp_path: Path):
    paths = Paths(tmp_path / "home")
    hardware = desktop()
    write_key(paths, KEY)
    with live_server(Store(paths), hardware, port=free_port(), api_key=KEY) as (url, served):
        write_endpoint(paths, url, 1)
        w = build_window(home=paths, hardware=hardware)
        qtbot.addWidget(w)
        assert isinstance(w.runtime, ServiceRuntime) and w.controller.runtime is w.runtime
        assert w.server_page.where.text().startswith(f"Using the Ember service at {url}:")
        assert not w.server_page.button.isEnabled()  # the service's API is the one
        # whose API serves, with its address and key: not "stopped" (the service serves)
        assert w.server_label.text() == f"API server: the Ember service at {url}"
        assert w.server_page.state.text() == f"Running at {url}"
        assert (w.server_page.url_now, w.server_page.key_now) == (url, KEY)
        tray = w.add_tray()  # as where the desktop has a tray (offscreen has none)
        menu = [a.text() for a in tray.menu.actions() if not a.isSeparator()]
        assert menu[0] == f"Server: the Ember service at {url}"
        assert "Start server" not in menu and "Stop server" not in menu  # `ember service`'s
        assert w.server_page.url_now == url  # showing the tray kept the service's address
        w.toggle_server()
        assert w.server is None
        assert not w.leave_a_gone_service()  # it answers: the window stays on it
        served.shutdown()

    w.new_chat()
    assert type(w.runtime) is Runtime and w.controller.runtime is w.runtime
    assert w.controller.choices.runtime is w.runtime and w.status_line.runtime is w.runtime
    assert f"The Ember service at {url} does not answer" in w.statusBar().currentMessage()
    assert w.server_page.where.text().startswith("Models run in this process")
    assert w.server_page.button.isEnabled()
    assert w.server_label.text() == "API server: stopped"  # this window's own, not started
    assert w.server_page.url_now == ""
    w.runtime.shutdown()
    w.history.close()
