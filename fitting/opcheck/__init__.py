"""The op report card: `python -m fitting.opcheck OP [SPEC]` (see fitting/opcheck/cli.py)."""
