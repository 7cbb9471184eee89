"""Ember as a per-user service: where a running one says it listens, and its key."""
