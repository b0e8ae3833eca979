"""`python -m gateway` runs the `session-gateway` command line."""

import sys

from .cli import main

sys.exit(main())
