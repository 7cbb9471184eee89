"""Every window test also checks the window's threads (app/gui/thread_guard.py): a worker
thread that calls into a Qt object fails the test, and so does a thread that dies of an
exception (pytest's warning about it is an error here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.gui.thread_guard import WindowThreadGuard

THREAD_DIED = "error::pytest.PytestUnhandledThreadExceptionWarning"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = config.rootpath / "tests" / "gui"
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.filterwarnings(THREAD_DIED))


@pytest.fixture(autouse=True)
def window_threads() -> Iterator[WindowThreadGuard]:
    guard = WindowThreadGuard()
    guard.install()
    yield guard
    guard.uninstall()
    assert not guard.violations, "\n\n".join(str(v) for v in guard.violations)
