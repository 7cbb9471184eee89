"""Ember's own routes: tokenize/detokenize (tokens), health and metrics (status)."""
