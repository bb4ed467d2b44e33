"""The process group: cluster environments, rendezvous, collectives with timeouts, rank-zero helpers."""
