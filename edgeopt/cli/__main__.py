"""`python -m edgeopt.cli`, the same as `edgeopt`."""

from edgeopt.cli.app import main

main()
