"""`python -m edgeopt`, the same as `edgeopt`."""

from edgeopt.cli.app import main

main()
