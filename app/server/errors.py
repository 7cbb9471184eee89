"""Errors as the three APIs shape them: OpenAI {"error": {message, type, param, code}}, Ollama
{"error": "message"}, Anthropic {"type": "error", "error": {type, message}}. The route's path
decides which shape a response gets (`error_body`)."""

from __future__ import annotations

from backends.base import ErrorEvent


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        if self.status == 401:
            return "authentication_error"
        if self.status == 429:
            return "rate_limit_error"
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict:
        return {"message": self.message, "type": self.type, "param": self.param,
                "code": self.code}

    def openai(self) -> dict:
        return {"error": self.body()}

    def ollama(self) -> dict:
        return {"error": self.message}

    @property
    def anthropic_type(self) -> str:
        """Anthropic's error type for the status (its API reference, "HTTP errors")."""
        if self.status >= 500:
            return "overloaded_error" if self.status in (503, 529) else "api_error"
        return ANTHROPIC_TYPES.get(self.status, "invalid_request_error")

    def anthropic(self) -> dict:
        return {"type": "error", "error": {"type": self.anthropic_type, "message": self.message}}


ANTHROPIC_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                   413: "request_too_large", 429: "rate_limit_error"}
ANTHROPIC_PATH = "/v1/messages"


def is_anthropic_path(path: str) -> bool:
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


def error_body(path: str, err: ApiError) -> dict:
    """The error in the shape of the API that `path` belongs to."""
    if path.startswith("/api/"):
        return err.ollama()
    if is_anthropic_path(path):
        return err.anthropic()
    return err.openai()


def error_for_event(event: ErrorEvent) -> ApiError:
    if event.kind == "invalid":
        return ApiError(400, event.message)
    code = "worker_crashed" if event.kind == "crash" else "backend_error"
    return ApiError(500, event.message, code=code)
