"""``cruxlab.measure.memory_at_scale``'s command line: its docstring says what it measures and how."""
import sys

from cruxlab.measure.memory_at_scale import main

sys.exit(main())
