import sys

from fitting.opcheck.cli import main

sys.exit(main())
