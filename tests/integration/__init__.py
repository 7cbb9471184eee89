"""Tests on real models, worker processes, the CLI and servers end to end."""
