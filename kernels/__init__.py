"""Triton kernels and their plain-torch references for the cuda backend
(docs/architecture.md)."""
