"""What the test tiers share: fake servers, tiny files, simulated machines, model names."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout, where `python -m app.cli` runs
# the in-process test client's address: the server answers loopback Hosts only
# (app.server.web_walls), and Starlette's default Host is `testserver`
LOOPBACK = "http://127.0.0.1"
