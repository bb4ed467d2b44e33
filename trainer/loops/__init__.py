"""The loops: fit (epochs, micro batches, accumulation windows, optimizer steps) and evaluation."""
