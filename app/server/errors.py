"""Errors as the two APIs shape them: OpenAI {"error": {message, type, param, code}}, Ollama
{"error": "message"}. The route prefix decides which shape a response gets."""

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


def error_for_event(event: ErrorEvent) -> ApiError:
    if event.kind == "invalid":
        return ApiError(400, event.message)
    code = "worker_crashed" if event.kind == "crash" else "backend_error"
    return ApiError(500, event.message, code=code)
