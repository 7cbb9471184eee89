"""The app's own errors: configuration, the registry, downloads and worker processes.

Every one is an `EmberError` (from `backends.errors`, where the errors engines raise live), so
the CLI, the window and the server report them all the same way.
"""

from __future__ import annotations

from backends.errors import EmberError


class ConfigError(EmberError):
    pass


class ModelNotFoundError(EmberError):
    def __init__(self, name: str, suggestions: list[str], where: str = "registry") -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown model {name!r} in the {where}{hint}")


class ModelBusyError(EmberError):
    """A request asks for a model loaded another way (context, backend) while the model
    answers other requests: reloading it would end their answers (an API's 409)."""


class DownloadError(EmberError):
    pass


class ChecksumError(DownloadError):
    pass


class WorkerCrashedError(EmberError):
    pass
