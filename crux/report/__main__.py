"""``python -m crux.report NAME ...``: the same as ``crux-report``."""
import sys

from crux.report import main

sys.exit(main())
