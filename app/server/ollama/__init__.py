"""Ollama's API under /api (and its `/` probe): routes, schemas, inbound conversion, wire."""
