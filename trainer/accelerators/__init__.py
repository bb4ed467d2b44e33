"""Devices: the accelerator, mixed precision, channels-last and torch.compile."""
