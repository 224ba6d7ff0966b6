"""The built-in sweeps of crux-sweep, one per claim, installed with the package as ``crux.sweeps``."""
