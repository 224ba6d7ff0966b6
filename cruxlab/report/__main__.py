"""``python -m cruxlab.report NAME ...``: the same as ``crux-report``."""
import sys

from cruxlab.report import main

sys.exit(main())
