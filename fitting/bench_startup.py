"""Alias of `python -m fitting.bench.startup`, the command older docs give."""

from fitting.bench.startup import main

if __name__ == "__main__":
    main()
