"""``cruxlab.measure.load_test``'s command line: its docstring says what it measures and how."""
import sys

from cruxlab.measure.load_test import main

sys.exit(main())
