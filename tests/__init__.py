"""Ember's tests, in three tiers by folder: unit/ (no model, no worker process), integration/
(real models, worker processes, the CLI and servers end to end) and gui/ (the window).
support/ holds what the tiers share. A package, so a tier may name a file as another does."""
