"""``lightning.pytorch.plugins.environments`` under ``python -m trainer.as_lightning``: Lightning's
cluster-environment plugins, for libraries that subclass them (Ray Train's ``RayLightningEnvironment``)
and scripts that pass one in ``Trainer(plugins=[...])``.

Lockstep reads the world itself (`trainer.distributed.cluster_environment`: Ray, torchrun, SLURM, one
process), so a plugin does not choose it: the Trainer tells the plugin the world it detected
(``set_world_size`` / ``set_global_rank``, as Lightning's strategies do) and refuses to start when the
plugin then reports another (`check_environment_plugin`). The plugin is the strategy's
``cluster_environment``, as in Lightning. `ClusterEnvironment` and `LightningEnvironment` are
Lightning's; the launcher-specific plugins import and subclass but refuse an instance
(`trainer.lightning.unsupported.refused_class`): Lockstep detects those launchers without them.
"""
from __future__ import annotations

import abc
import os
import socket
from typing import Any, Sequence

from trainer.lightning.unsupported import refused_class

__all__ = [
    "ClusterEnvironment", "KubeflowEnvironment", "LSFEnvironment", "LightningEnvironment", "MPIEnvironment",
    "SLURMEnvironment", "TorchElasticEnvironment", "XLAEnvironment",
]


class ClusterEnvironment(abc.ABC):
    """Lightning's interface of a cluster-environment plugin: where this process sits in the job."""

    @property
    @abc.abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether something outside the Trainer started this job's processes."""

    @property
    @abc.abstractmethod
    def main_address(self) -> str:
        """The address of global rank 0's rendezvous."""

    @property
    @abc.abstractmethod
    def main_port(self) -> int:
        """The port of global rank 0's rendezvous."""

    @staticmethod
    @abc.abstractmethod
    def detect() -> bool:
        """Whether this process runs in this kind of environment."""

    @abc.abstractmethod
    def world_size(self) -> int:
        """The number of processes in the job."""

    @abc.abstractmethod
    def set_world_size(self, size: int) -> None:
        """Told the job's process count by the Trainer."""

    @abc.abstractmethod
    def global_rank(self) -> int:
        """This process's rank in the job."""

    @abc.abstractmethod
    def set_global_rank(self, rank: int) -> None:
        """Told this process's rank by the Trainer."""

    @abc.abstractmethod
    def local_rank(self) -> int:
        """This process's rank on its node."""

    @abc.abstractmethod
    def node_rank(self) -> int:
        """This node's rank among the nodes."""

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Raise if ``devices`` / ``num_nodes`` cannot hold in this environment (nothing by default)."""

    def teardown(self) -> None:
        """Clean up what the environment set, at the end of a run."""


class LightningEnvironment(ClusterEnvironment):
    """Lightning's default environment: ``LOCAL_RANK`` / ``NODE_RANK`` (or ``GROUP_RANK``) from the
    environment, the world size and global rank as the Trainer sets them (1 and 0 before)."""

    def __init__(self) -> None:
        super().__init__()
        self._main_port = -1
        self._global_rank = 0
        self._world_size = 1

    @property
    def creates_processes_externally(self) -> bool:
        """Whether a launcher set ``LOCAL_RANK`` (it started the processes)."""
        return "LOCAL_RANK" in os.environ

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else this host."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else a free port found once."""
        if self._main_port == -1:
            self._main_port = int(os.environ["MASTER_PORT"]) if "MASTER_PORT" in os.environ else _free_port()
        return self._main_port

    @staticmethod
    def detect() -> bool:
        """Always: the environment of any process."""
        return True

    def world_size(self) -> int:
        """The process count the Trainer set (1 before)."""
        return self._world_size

    def set_world_size(self, size: int) -> None:
        """Keep the job's process count."""
        self._world_size = size

    def global_rank(self) -> int:
        """The rank the Trainer set (0 before)."""
        return self._global_rank

    def set_global_rank(self, rank: int) -> None:
        """Keep this process's rank."""
        self._global_rank = rank

    def local_rank(self) -> int:
        """``LOCAL_RANK``, else 0."""
        return int(os.environ.get("LOCAL_RANK", 0))

    def node_rank(self) -> int:
        """``NODE_RANK``, else ``GROUP_RANK``, else 0."""
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", 0)))

    def teardown(self) -> None:
        """Drop ``WORLD_SIZE``, as Lightning's does."""
        os.environ.pop("WORLD_SIZE", None)


def _free_port() -> int:
    if "STANDALONE_PORT" in os.environ:
        return int(os.environ["STANDALONE_PORT"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


_DETECTED = "no plugin: Lockstep detects torchrun, SLURM and Ray Train itself (docs/distributed.md)"
TorchElasticEnvironment = refused_class(__name__, "TorchElasticEnvironment", _DETECTED)
SLURMEnvironment = refused_class(__name__, "SLURMEnvironment", _DETECTED)
_OTHER = "torchrun, SLURM or Ray Train, which Lockstep detects itself (docs/distributed.md)"
KubeflowEnvironment = refused_class(__name__, "KubeflowEnvironment", _OTHER)
LSFEnvironment = refused_class(__name__, "LSFEnvironment", _OTHER)
MPIEnvironment = refused_class(__name__, "MPIEnvironment", _OTHER)
XLAEnvironment = refused_class(__name__, "XLAEnvironment", "accelerator='cpu' or 'cuda' (TPUs are not supported)")


def split_environment_plugin(plugins: Any) -> tuple[ClusterEnvironment | None, Any]:
    """``Trainer(plugins=...)`` split into its cluster-environment plugin (None if none) and the rest
    (None if nothing is left), so that only the rest meets the refused-arguments check."""
    given: Sequence[Any] = plugins if isinstance(plugins, (list, tuple)) else [] if plugins is None else [plugins]
    environments = [p for p in given if isinstance(p, ClusterEnvironment)]
    if len(environments) > 1:
        raise ValueError(
            f"Trainer(plugins=...) got {len(environments)} cluster environments "
            f"({', '.join(type(e).__name__ for e in environments)}); give at most one."
        )
    rest = [p for p in given if not isinstance(p, ClusterEnvironment)]
    return (environments[0] if environments else None), (rest or None)


def connect_environment_plugin(strategy: Any, plugins: Any) -> None:
    """Give ``strategy`` the cluster-environment plugin among ``Trainer(plugins=...)``, if any, once
    `check_environment_plugin` has found it agrees with the strategy's placement."""
    plugin, _ = split_environment_plugin(plugins)
    if plugin is not None:
        check_environment_plugin(plugin, strategy.placement)
        strategy.use_environment_plugin(plugin)


def check_environment_plugin(plugin: ClusterEnvironment, placement: Any) -> None:
    """Tell ``plugin`` the world Lockstep detected (``placement``, a
    `trainer.distributed.cluster_environment.ClusterEnvironment`), as Lightning's strategy does, and
    raise ``ValueError`` naming each value the plugin then reports otherwise (a plugin reading a
    launcher Lockstep did not see, or another one)."""
    plugin.set_world_size(placement.world_size)
    plugin.set_global_rank(placement.global_rank)
    reported = {name: getattr(plugin, name)() for name in ("world_size", "global_rank", "local_rank", "node_rank")}
    wrong = [f"{name}() = {value} (Lockstep: {getattr(placement, name)})"
             for name, value in reported.items() if value != getattr(placement, name)]
    if wrong:
        raise ValueError(
            f"Trainer(plugins=[{type(plugin).__name__}()]) reports another world than the one Lockstep detected "
            f"({placement.source}): {'; '.join(wrong)}. Lockstep joins the world it detects (docs/distributed.md); "
            "drop the plugin or launch the job so that both agree."
        )
