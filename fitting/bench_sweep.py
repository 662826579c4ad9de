"""Alias of `python -m fitting.bench.sweep`, the command older docs give."""

from fitting.bench.sweep import main

if __name__ == "__main__":
    main()
