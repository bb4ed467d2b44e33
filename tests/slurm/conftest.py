"""The ``slurm_cluster`` fixture: one private single-node SLURM per test session (tests/slurm).

Started once per session (per xdist worker) by `local_slurm.LocalSlurm`; its start time is
written to stderr (shown with ``-s``). Tests that use it skip with the reason when
slurmctld/slurmd/munged are not installed or the suite does not run as root.
"""
from __future__ import annotations

import sys
from typing import Iterator

import pytest
from tests.slurm.local_slurm import LocalSlurm, missing_reason


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """A running single-node SLURM (node idle); stopped, with every job killed, afterwards."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        sys.stderr.write(f"\n[slurm] private SLURM started in {cluster.start_seconds:.1f} s\n")
        yield cluster
    finally:
        cluster.stop()
