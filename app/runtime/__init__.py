"""The Runtime every front end uses; each loaded model lives in its own worker process."""

from app.runtime.runtime import Generation, Runtime

__all__ = ["Generation", "Runtime"]
