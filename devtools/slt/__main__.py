"""`python -m devtools.slt`: the sqllogictest command line (see `cli`)."""

import sys

from .cli import main

sys.exit(main())
