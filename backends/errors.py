"""Errors a user can read: one line that names the thing and what is wrong with it.

The errors a backend can raise live here, below `app`, so that engines never import the app;
the app's own errors (configuration, downloads, the worker) subclass `EmberError` in
`app.errors`.
"""

from __future__ import annotations


class EmberError(Exception):
    """Base of every error Ember reports to a user (CLI prints it without a traceback)."""


class InvalidRequestError(EmberError):
    """The caller's mistake. `param` is where in the request it is, as a path
    (`tools[0].function.parameters.properties.city`), when one place is to blame."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ModelFileError(EmberError):
    """A model file that is not usable (not GGUF, truncated, unknown architecture...)."""


class TemplateError(EmberError):
    pass


class BackendError(EmberError):
    partial: str = ""  # the answer's text that arrived before the failure, if any


class RemoteError(BackendError):
    """A remote endpoint failed: unreachable, timed out, refused the key, or answered badly.
    `status` is the HTTP status when the server sent one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
