import os
import sys

from fitting.opcheck.cli import main
from models.ops.guard import still_running

code = main()
if still_running():
    # An op that never returned still runs in a daemon thread; torch aborts the process if
    # the interpreter shuts down around it, so leave without the shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
