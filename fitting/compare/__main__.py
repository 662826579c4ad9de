"""`python -m fitting.compare SWEEP_DIR`: see fitting/compare/cli.py."""

import sys

from fitting.compare.cli import main

sys.exit(main())
