"""Alias of `python -m fitting.bench.optimizers`, the command older docs give."""

from fitting.bench.optimizers import main

if __name__ == "__main__":
    main()
