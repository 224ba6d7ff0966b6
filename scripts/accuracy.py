"""``cruxlab.measure.poisson_accuracy``'s command line: its docstring says what it measures and how."""
from cruxlab.measure.poisson_accuracy import main

main()
