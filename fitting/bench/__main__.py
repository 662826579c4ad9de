"""`python -m fitting.bench`: see fitting/bench/cli.py."""

from fitting.bench.cli import main

main()
