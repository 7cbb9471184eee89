"""The Runtime every front end uses; each loaded model lives in its own worker process.

`Runtime` and `Generation` are imported on first use, so the light parts of this package (the
backend table, the backend choice, remote endpoints) import without the Runtime's own imports
(the fit model imports the backend choice, and the Runtime imports the fit model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.runtime.runtime import Generation, Runtime

__all__ = ["Generation", "Runtime"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from app.runtime import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'app.runtime' has no attribute {name!r}")
