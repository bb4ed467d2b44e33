"""Data: loaders and their batch counts, distributed samplers, the batch walk, device prefetching."""
