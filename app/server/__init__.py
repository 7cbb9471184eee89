"""Headless HTTP server: OpenAI- and Ollama-compatible APIs over the Runtime."""
