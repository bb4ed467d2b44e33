"""The benchmark scenarios: which workload, how many processes, which loops side by side."""
from __future__ import annotations

import dataclasses

from benchmarks.workload import Workload


@dataclasses.dataclass(frozen=True)
class Variant:
    """One training loop to run: a script under ``benchmarks/`` and its extra arguments.

    ``needs`` names a module that must be importable (the ``bench`` extra); without it the
    variant is skipped with a message instead of failing the suite. ``sharded``: each rank should
    hold 1/W of the training state (FSDP), which the report checks.
    """

    name: str
    script: str
    extra: tuple[str, ...] = ()
    needs: str | None = None
    sharded: bool = False


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A workload run by every variant, interleaved ``repeats`` times, on ``device``.

    ``reports_state``: the report adds a table of each rank's parameter, gradient and optimizer
    state bytes (`benchmarks.memory`).
    """

    key: str
    title: str
    measures: str
    workload: Workload
    nproc: int
    variants: tuple[Variant, ...]
    repeats: int
    device: str = "cpu"
    reports_state: bool = False

    @property
    def baseline(self) -> Variant:
        """The hand-written loop every ratio is taken against (always the first variant)."""
        return self.variants[0]


HANDWRITTEN_SINGLE = Variant("handwritten", "handwritten/single.py")
HANDWRITTEN_DDP = Variant("handwritten", "handwritten/ddp_ga.py")
LOCKSTEP = Variant("lockstep", "frameworks/lockstep_bench.py")
LOCKSTEP_DEFAULTS = Variant("lockstep (defaults)", "frameworks/lockstep_bench.py", ("--defaults",))
HANDWRITTEN_FSDP = Variant("handwritten fsdp", "handwritten/fsdp.py", sharded=True)
LOCKSTEP_FSDP = Variant("lockstep fsdp", "frameworks/lockstep_bench.py", ("--strategy", "fsdp"), sharded=True)
LIGHTNING = Variant("lightning", "frameworks/lightning_bench.py", needs="lightning")
ACCELERATE = Variant("accelerate", "frameworks/accelerate_bench.py", needs="accelerate")


def scenarios(quick: bool = False, device: str = "cpu") -> list[Scenario]:
    """Scenarios 1-3 and 6 (the training runs; start-up and memory are read from their results).

    ``quick`` runs a third of the epochs and two repeats: a smoke run, not a measurement.
    ``device="cuda"`` runs every process on its own GPU, the several-process scenarios with NCCL.
    """
    reps = 2 if quick else 5
    ranks = "NCCL, 1 GPU each" if device == "cuda" else "gloo, 1 thread each"

    def epochs(n: int) -> int:
        return max(2, n // 3) if quick else n

    return [
        Scenario(
            key="s1_small",
            title="1. single process, small model (hidden 256, batch 32)",
            measures="per-step framework overhead: the model is small, so the loop's own work shows",
            workload=Workload(hidden=256, batch_size=32, samples=1000, epochs=epochs(12)),
            nproc=1,
            variants=(HANDWRITTEN_SINGLE, LOCKSTEP, LOCKSTEP_DEFAULTS, LIGHTNING, ACCELERATE),
            repeats=reps,
            device=device,
        ),
        Scenario(
            key="s2_large",
            title="2. single process, the post's model (hidden 1024, batch 64)",
            measures="per-step cost on a realistic step",
            workload=Workload(hidden=1024, batch_size=64, samples=1000, epochs=epochs(6)),
            nproc=1,
            variants=(HANDWRITTEN_SINGLE, LOCKSTEP, LOCKSTEP_DEFAULTS, LIGHTNING, ACCELERATE),
            repeats=reps,
            device=device,
        ),
        Scenario(
            key="s3_ddp",
            title=f"3. DDP, 2 processes under torchrun ({ranks}), micro batch 16, accumulation 4",
            measures="DDP + no_sync accumulation against the post's ddp_ga.py",
            workload=Workload(hidden=1024, batch_size=16, accumulate=4, samples=1000, epochs=epochs(5)),
            nproc=2,
            variants=(HANDWRITTEN_DDP, LOCKSTEP, LIGHTNING, ACCELERATE),
            repeats=reps,
            device=device,
        ),
        Scenario(
            key="s6_fsdp",
            title=f"6. FSDP against DDP, 2 processes under torchrun ({ranks}), 5.5 M parameters, batch 32",
            measures="per-rank parameter + gradient + optimizer-state bytes and step time, FSDP2 "
                     "(fully_shard per Linear) against DDP; ratios are to the hand-written DDP loop",
            workload=Workload(hidden=1024, depth=4, batch_size=32, samples=512, epochs=epochs(6)),
            nproc=2,
            variants=(HANDWRITTEN_DDP, LOCKSTEP, HANDWRITTEN_FSDP, LOCKSTEP_FSDP),
            repeats=reps,
            device=device,
            reports_state=True,
        ),
    ]


# The frameworks whose import time scenario 4 measures on top of `import torch`.
IMPORTS = (("lockstep", "trainer"), ("lightning", "lightning"), ("accelerate", "accelerate"))
