"""`python -m edgeformer.cli ...` = `edgeformer ...`."""

import sys

from edgeformer.cli import main

sys.exit(main())
