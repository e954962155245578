"""Strategies on ``jax.sharding``, multi-host set-up, and prefetching batches to devices."""
