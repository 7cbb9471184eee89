"""Which Runtime a front end starts with: the running Ember service's, when one answers on
the address it wrote with the key in the data folder (app.service.endpoint), so a model is
loaded once for the window, the API and the CLI; else an in-process Runtime, as before."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.config import Paths
from app.hardware import HardwareProfile
from app.service.endpoint import read_endpoint, service_key
from app.store import Store

if TYPE_CHECKING:
    from app.runtime.runtime import Runtime
    from app.runtime.service_runtime import ServiceRuntime

log = logging.getLogger(__name__)


def service_runtime(paths: Paths, store: Store | None = None,
                    hardware: HardwareProfile | None = None) -> ServiceRuntime | None:
    """The running service's Runtime, or None: no endpoint file, no key, or a service that
    does not answer with that key (one that stopped, or another program on its port)."""
    from app.runtime.service_runtime import ServiceRuntime

    endpoint, key = read_endpoint(paths), service_key(paths)
    if endpoint is None or key is None:
        return None
    runtime = ServiceRuntime(endpoint.url, key, store or Store(paths), hardware)
    if runtime.answers():
        log.info("joining the Ember service at %s (pid %s)", endpoint.url, endpoint.pid)
        return runtime
    log.info("the Ember service at %s does not answer: running models in this process",
             endpoint.url)
    runtime.shutdown()
    return None


def choose_runtime(paths: Paths, store: Store | None = None,
                   hardware: HardwareProfile | None = None) -> Runtime:
    """The service's Runtime when one answers, else a Runtime of this process's own."""
    from app.runtime.runtime import Runtime

    store = store or Store(paths)
    joined = service_runtime(paths, store, hardware)
    return joined if joined is not None else Runtime(store=store, hardware=hardware)


def describe(runtime: Runtime) -> str:
    """What the Server page and the CLI say about where models run."""
    from app.runtime.service_runtime import ServiceRuntime

    if isinstance(runtime, ServiceRuntime):
        return runtime.describe
    return "Models run in this process (no Ember service is running)"
