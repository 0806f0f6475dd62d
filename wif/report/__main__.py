"""`python -m wif.report`: the same as the `wif-report` console script."""

import sys

from wif.report.report_cli import main

sys.exit(main())
