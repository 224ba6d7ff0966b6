"""``cruxlab.measure.calibration``'s command line: its docstring says what it measures and how."""
import sys

from cruxlab.measure.calibration import main

sys.exit(main())
