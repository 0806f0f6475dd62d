"""`python -m wif.report`: the same as the `wif-report` console script."""

import sys

from wif.report.cli import main

sys.exit(main())
