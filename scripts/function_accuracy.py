"""``cruxlab.measure.function_accuracy``'s command line: its docstring says what it measures and how."""
import sys

from cruxlab.measure.function_accuracy import main

sys.exit(main())
