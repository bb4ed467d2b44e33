"""Launching processes: self-launch and spawn, worker lifecycles, failure notes, pre-emption."""
