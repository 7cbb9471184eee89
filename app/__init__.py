"""Ember: a local LLM app. Front ends (CLI, GUI, server) live here; engines live in `backends`."""

__version__ = "0.1.0"
