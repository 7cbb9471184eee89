"""What the test tiers share: fake servers, tiny files, simulated machines, model names."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout, where `python -m app.cli` runs
