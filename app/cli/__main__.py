"""`python -m app.cli`."""

from app.cli import main

main()
