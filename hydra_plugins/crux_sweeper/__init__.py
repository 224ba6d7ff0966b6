"""crux's Hydra sweeper (``hydra/sweeper=crux``), the default of crux-run and crux-sweep."""
