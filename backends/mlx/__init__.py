"""MLX models through mlx-lm: `backend.MlxBackend`, and `gguf_to_mlx` (GGUF -> MLX).

Nothing is imported here: the app imports this package's modules only in a worker.
"""
