"""`python -m fitting.compare`: see fitting/compare/report.py."""

import sys

from fitting.compare.report import main

sys.exit(main())
