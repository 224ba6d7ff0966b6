"""Test session set-up: a persistent compilation cache, so identical programs compile once per suite."""
import os
import tempfile

import jax

jax.config.update("jax_compilation_cache_dir",
                  os.environ.get("CRUX_TEST_JAX_CACHE", os.path.join(tempfile.gettempdir(), "crux-test-jax-cache")))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
