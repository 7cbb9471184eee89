"""Ember's log: one configuration of the standard `logging` for every entry point.

The file is `logs/ember.log` in the data folder (`EMBER_HOME` moves it with the rest),
rotated at 5 MB with 3 older files kept (`ember.log.1` the newest of them). The `ember`
command (and with it `ember serve`), the window and every worker process write there.

Level: INFO; `EMBER_LOG` names another (debug, info, warning, error, critical). Anything else
is a ConfigError, as a bad EMBER_CONTEXT is: a typo must not quietly log less than asked.
`ember --verbose` means DEBUG and echoes each line to stderr too; `ember serve` echoes
warnings to stderr, since a server's console is where its operator looks.

One logger per module (`logging.getLogger(__name__)`), so a line names its subsystem:
app.runtime.worker_handle, app.server.access_log, app.pull.install. Only Ember's own loggers
(`app`, `backends`) follow the level; other libraries log warnings and worse (at INFO httpx
writes a line per HTTP request).

Worker processes (spawned) hand their records to the parent over the pipe they already have
(`ForwardHandler`), and the parent writes them. One writer keeps rotation safe (a
RotatingFileHandler in each process would rename the file under the others), and the pipe is
synchronous and ordered: what a worker logged before it crashed is in the parent before the
parent notices the crash. A multiprocessing queue would hand records to a feeder thread that a
segfault can kill first, and would need a listener thread of its own.

Never log a prompt, an answer or a key: lines carry names, numbers and kinds of error.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import sys
from collections.abc import Callable
from pathlib import Path

from app.config import Paths, paths
from app.errors import ConfigError

ENV = "EMBER_LOG"
MAX_BYTES = 5 * 2**20  # a few days of a busy server's request lines
BACKUPS = 3
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR, "critical": logging.CRITICAL}
OWN = ("app", "backends")  # the loggers that follow Ember's level
FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(process)d] %(message)s"

_added: list[logging.Handler] = []  # what setup() put on the root logger, for reset()
_file: Path | None = None
_echo: logging.Handler | None = None


def env_level() -> int:
    """The level EMBER_LOG names (INFO when unset)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return logging.INFO
    if raw.lower() not in LEVELS:
        raise ConfigError(f"{ENV}={raw!r} is not a log level: use one of {', '.join(LEVELS)}")
    return LEVELS[raw.lower()]


def log_file(home: Paths | None = None) -> Path:
    return (home or paths()).logs / "ember.log"


def setup(verbose: bool = False, echo: int | None = None, home: Paths | None = None) -> Path | None:
    """Configure logging for this process, once: the file at `level()`, and stderr from `echo`
    up (DEBUG with `verbose`). A later call only adds echoing (`ember serve` under the
    `ember` group). Returns the log file, or None when it cannot be written (then a warning
    says so on stderr and Ember runs on: a log must never stop the app)."""
    global _file
    level = logging.DEBUG if verbose else env_level()
    if verbose:
        echo = logging.DEBUG
    if not _added:
        file = log_file(home)
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            handler: logging.Handler = logging.handlers.RotatingFileHandler(
                file, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
        except OSError as e:
            print(f"warning: cannot write the log file {file} ({e}); not logging to a file",
                  file=sys.stderr)
            handler = logging.NullHandler()  # still marks logging as configured
        else:
            _file = file
        _add(handler)
        _set_levels(level)
    if echo is not None:
        _echo_from(echo)
    logging.getLogger(__name__).debug("logging at %s to %s", logging.getLevelName(level),
                                      _file or "no file")
    return _file


def level() -> int:
    """Ember's level in this process (what a worker is started with)."""
    return logging.getLogger(OWN[0]).getEffectiveLevel()


def reset() -> None:
    """Undo setup(): remove and close its handlers (tests; a process that moves its home)."""
    global _file, _echo
    root = logging.getLogger()
    for handler in _added:
        root.removeHandler(handler)
        handler.close()
    _added.clear()
    _file = _echo = None
    root.setLevel(logging.WARNING)
    for name in OWN:
        logging.getLogger(name).setLevel(logging.NOTSET)


def _add(handler: logging.Handler) -> None:
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.getLogger().addHandler(handler)
    _added.append(handler)


def _set_levels(own: int) -> None:
    logging.getLogger().setLevel(max(own, logging.WARNING))
    for name in OWN:
        logging.getLogger(name).setLevel(own)


def _echo_from(threshold: int) -> None:
    global _echo
    if _echo is None:
        _echo = logging.StreamHandler(sys.stderr)
        _add(_echo)
        _echo.setLevel(threshold)
    else:
        _echo.setLevel(min(_echo.level, threshold))


# -- worker processes -------------------------------------------------------------------------
class ForwardHandler(logging.handlers.QueueHandler):
    """A worker's only handler: each record, its message formatted here (arguments and
    tracebacks need not pickle), goes to `send`, which puts it on the pipe to the parent."""

    def __init__(self, send: Callable[[logging.LogRecord], None]) -> None:
        super().__init__(queue=None)  # type: ignore[arg-type]
        self._send = send

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = super().prepare(record)
        record.stack_info = None  # already in the message (3.11's prepare keeps it)
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError):  # the parent is gone: no one is left to tell
            self._send(record)


def setup_worker(send: Callable[[logging.LogRecord], None], own_level: int) -> None:
    """In a worker process: every record goes to the parent through `send`, at the level
    the parent logs at."""
    logging.getLogger().handlers[:] = [ForwardHandler(send)]
    _set_levels(own_level)


def handle_forwarded(record: logging.LogRecord) -> None:
    """Write a worker's record here, as if logged here (its process id stays the worker's)."""
    logging.getLogger(record.name).handle(record)
