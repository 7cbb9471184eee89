"""The service's `ember serve` announces itself: DATA/service/endpoint.json written once it
listens (a reader never finds an address that does not answer yet) and removed when it stops.
Needs the server's extra (uvicorn); only `ember serve --service` imports it."""

from __future__ import annotations

import logging
import socket

import uvicorn

from app.config import paths
from app.service.endpoint import remove_endpoint, write_endpoint
from app.service.spec import ServiceConfig

log = logging.getLogger(__name__)


class AnnouncedServer(uvicorn.Server):
    # In startup/shutdown, not around run(): on SIGTERM uvicorn re-raises the signal once
    # it has shut down, which ends the process before code after run() would remove the file.
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # False when the port could not be bound
            url = ServiceConfig(host=self.config.host, port=self.config.port).url
            write_endpoint(paths(), url)
            log.info("service announced on %s", url)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        remove_endpoint(paths())
        await super().shutdown(sockets)
