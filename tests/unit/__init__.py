"""Model-free tests: no real model, no worker process; the tier runs in under a minute."""
