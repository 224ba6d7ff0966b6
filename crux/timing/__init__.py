"""Paired, interleaved timing: how much longer one setting of solve() takes per epoch than another, with a
confidence interval, measured in one process.

:mod:`crux.timing.pairs` times the two settings in alternating chunks, :mod:`crux.timing.interval` gives the
bootstrap interval of their ratio and places it against a band, :mod:`cruxlab.bands` holds the bands the
claims judge timings with, and :mod:`crux.timing.machine` names the machine and the clock a chunk is timed on.
"""
