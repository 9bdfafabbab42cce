"""`python -m devtools.fuzz`: a differential run (see `run`)."""

import sys

from .run import main

sys.exit(main())
