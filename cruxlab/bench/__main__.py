"""``python -m cruxlab.bench``: crux-bench."""
import sys

from cruxlab.bench.command_line import main

sys.exit(main())
