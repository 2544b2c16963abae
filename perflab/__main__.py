"""``python -m perflab``: the same command line as the ``perflab`` console script."""

import sys

from perflab.cli import main

sys.exit(main())
