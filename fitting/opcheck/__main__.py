import sys

from fitting.opcheck import clash

if line := clash():  # before anything imports the lab's packages by those names
    print(line, file=sys.stderr)
    sys.exit(2)

from fitting.opcheck.cli import main  # noqa: E402

sys.exit(main())
