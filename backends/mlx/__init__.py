"""MLX models through mlx-lm: `backend.MlxBackend`, and `gguf_to_mlx` (GGUF -> MLX).

Nothing is imported here, so a conversion (gguf_to_mlx) does not load the backend.
"""
