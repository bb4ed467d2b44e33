"""The blog post's hand-written training loops, adapted to CPU / gloo: the benchmark baselines."""
