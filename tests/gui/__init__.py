"""The desktop window, driven like a user would (pytest-qt, offscreen Qt)."""
