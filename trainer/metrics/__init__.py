"""Metrics: what `self.log` records, its epoch aggregates, and what reaches the loggers."""
