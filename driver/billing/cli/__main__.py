"""`python -m billing.cli`: the `billing` command."""

from billing.cli import main

main()
