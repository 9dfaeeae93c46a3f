"""`python -m e31`, the same as the `e31` command."""

from e31.cli import main

main()
