"""Triton kernels and their plain-torch references for the cuda backend (see DESIGN.md)."""
