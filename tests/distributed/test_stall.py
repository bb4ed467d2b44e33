"""`CollectiveProgress`: the count a stalled rank is named by (nesting, a collective that raised),
and which live peers are behind it. One process: the collectives are named, not run."""
from __future__ import annotations

import pytest

from trainer.distributed.stall import CollectiveProgress, behind_peers, describe, print_stacks

pytestmark = pytest.mark.timeout(10)


def test_the_count_goes_on_through_nested_collectives_and_returns_to_the_outer_one():
    progress = CollectiveProgress()
    assert describe(progress.record()) == "no collective yet"
    with progress.inside("backward, gradients synced"):
        with progress.inside("all_reduce (mean)"):  # a sync_dist reduce inside a training step
            assert progress.record()["collective"] == 2 and progress.record()["op"] == "all_reduce (mean)"
        record = progress.record()
        assert (record["collective"], record["op"], record["inside"]) == (2, "backward, gradients synced", True)
    record = progress.record()
    assert (record["collective"], record["op"], record["inside"]) == (2, "backward, gradients synced", False)


def test_a_collective_that_raised_leaves_the_state_inside_it():
    progress = CollectiveProgress()
    with pytest.raises(RuntimeError):
        with progress.inside("barrier"):
            raise RuntimeError("Timed out waiting 5000ms for recv operation to complete")
    assert describe(progress.record()) == "collective #1 (barrier)" and progress.record()["inside"]


def test_the_peers_behind_are_those_with_a_lower_count_furthest_first():
    beats = [{"rank": 1, "collective": 9}, {"rank": 2, "collective": 7}, {"rank": 3, "collective": 10}]
    assert [b["rank"] for b in behind_peers(beats, {"collective": 10, "inside": True})] == [2, 1]
    assert behind_peers(beats, {"collective": 7, "inside": True}) == []


def test_the_stacks_print_once_per_announcement_also_on_a_stderr_without_a_descriptor(capsys):
    print_stacks("[lockstep] rank 0: the header", '{"rank": 0}')  # pytest's stderr has no fileno
    print_stacks("[lockstep] rank 0: the header", '{"rank": 0}')
    err = capsys.readouterr().err
    assert err.count("[lockstep] rank 0: the header\n") == 1
    assert "Thread 0x" in err and ", in test_the_stacks_print_once_per_announcement" in err, err  # traceback's format
