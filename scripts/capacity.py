"""``cruxlab.measure.capacity_verdicts``'s command line: its docstring says what it measures and how."""
import sys

from cruxlab.measure.capacity_verdicts import main

sys.exit(main())
