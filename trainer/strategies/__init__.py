"""Strategies: how the module runs across processes (single device, DDP, all-reduce) and SyncBatchNorm."""
