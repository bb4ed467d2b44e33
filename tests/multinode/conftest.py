"""The simulated cluster of tests/multinode, one per test module: ``CLUSTER_NODES`` in the module
says how many nodes (3 if it does not), and the module skips where no cluster can be built."""
from __future__ import annotations

import pytest

from tests.multinode.cluster import Cluster, unavailable


@pytest.fixture(scope="module")
def cluster(request):
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    nodes = Cluster(getattr(request.module, "CLUSTER_NODES", 3))
    try:
        yield nodes
    finally:
        nodes.close()
