"""Inference engines behind one protocol (`backends.base.Backend`); each runs in a worker."""
