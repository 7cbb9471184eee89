"""MLX models through mlx-lm: `backend.MlxBackend`, and `convert` (GGUF -> MLX).

Nothing is imported here: `config` is read in the main process, which must not load MLX.
"""
