"""``cruxlab.measure.tracking_share``'s command line: its docstring says what it measures and how."""
from cruxlab.measure.tracking_share import main

main()
