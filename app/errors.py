"""Errors a user can read: one line that names the thing and what is wrong with it."""

from __future__ import annotations


class EmberError(Exception):
    """Base of every error Ember reports to a user (CLI prints it without a traceback)."""


class ConfigError(EmberError):
    pass


class ModelNotFoundError(EmberError):
    def __init__(self, name: str, suggestions: list[str], where: str = "registry") -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown model {name!r} in the {where}{hint}")


class InvalidRequestError(EmberError):
    pass


class ModelFileError(EmberError):
    """A model file that is not usable (not GGUF, truncated, unknown architecture...)."""


class TemplateError(EmberError):
    pass


class DownloadError(EmberError):
    pass


class ChecksumError(DownloadError):
    pass


class WorkerCrashedError(EmberError):
    pass


class BackendError(EmberError):
    partial: str = ""  # the answer's text that arrived before the failure, if any


class RemoteError(BackendError):
    """A remote endpoint failed: unreachable, timed out, refused the key, or answered badly.
    `status` is the HTTP status when the server sent one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
