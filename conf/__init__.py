"""crux-run's Hydra config groups, installed with the package as ``crux.conf`` (Hydra: ``pkg://crux.conf``)."""
