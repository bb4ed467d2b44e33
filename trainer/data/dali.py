"""NVIDIA DALI pipelines as a data source: `DALILoader` (the ``dali`` extra; docs/dali.md).

The user writes a pipeline definition (``@nvidia.dali.pipeline_def``) that takes ``shard_id``
and ``num_shards`` and passes them to its reader; ``train_dataloader()`` (or any loader hook)
returns ``DALILoader(definition, output_map=[...])``. When a stage sets up its loaders the
strategy gives each rank its copy, built with ``shard_id = global rank`` and ``num_shards =
world size``. Every Trainer epoch is one epoch of the reader, its batch count known in advance
and equal on every rank; batches are dicts of torch tensors, which the loop moves to the device.

DALI is imported only here, and only when a `DALILoader` is created: ``import trainer`` does not
need it.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

__all__ = ["DALILoader", "LAST_BATCH_POLICIES"]

LAST_BATCH_POLICIES = ("fill", "drop", "partial")


def _dali() -> Any:
    """The ``nvidia.dali`` package, or an ImportError that names the extra to install."""
    try:
        import nvidia.dali
    except ImportError as err:
        raise ImportError(
            "DALILoader needs NVIDIA DALI, which is not installed: pip install 'lockstep-trainer[dali]' "
            "(the package nvidia-dali-cuda130; see docs/dali.md)."
        ) from err
    return nvidia.dali


def _check_pipeline(pipeline_fn: Callable[..., Any]) -> None:
    """A ``@pipeline_def`` function that takes the shard the Trainer passes."""
    if not callable(pipeline_fn):
        raise TypeError(
            f"DALILoader: pipeline_fn must be a @pipeline_def function, got {type(pipeline_fn).__name__}."
        )
    params = inspect.signature(pipeline_fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [name for name in ("shard_id", "num_shards") if name not in params and not takes_any]
    if missing:
        raise TypeError(
            f"DALILoader: the pipeline definition {getattr(pipeline_fn, '__name__', pipeline_fn)!r} must "
            f"take {' and '.join(missing)} (the Trainer passes each rank's shard) and give them "
            "to its reader."
        )


def _check_arguments(output_map: Sequence[str], last_batch_policy: str | None, pipeline_kwargs: dict[str, Any]) -> None:
    """Names for the outputs, a known last-batch policy, nothing the Trainer sets."""
    if isinstance(output_map, str) or not output_map or not all(isinstance(n, str) for n in output_map):
        raise TypeError(f"DALILoader: output_map must be a non-empty list of names, got {output_map!r}.")
    if len(set(output_map)) != len(output_map):
        raise ValueError(f"DALILoader: output_map has repeated names: {list(output_map)}.")
    if last_batch_policy is not None and last_batch_policy not in LAST_BATCH_POLICIES:
        raise ValueError(
            f"DALILoader: last_batch_policy must be one of {list(LAST_BATCH_POLICIES)} or None, "
            f"got {last_batch_policy!r}."
        )
    for name in ("shard_id", "num_shards", "checkpoint", "enable_checkpointing"):
        if name in pipeline_kwargs:
            raise ValueError(f"DALILoader: {name} is set by the Trainer; do not pass it.")


class DALILoader:
    """Batches of a DALI pipeline, one shard per rank, one reader epoch per Trainer epoch.

    Args:
        pipeline_fn: a ``@pipeline_def`` function with parameters ``shard_id`` and ``num_shards``,
            which it passes to its reader together with ``pad_last_batch=True``.
        output_map: one name per pipeline output; a batch is ``{name: tensor}``.
        reader_name: the ``name=`` of the reader that defines the epoch (needed only when the
            pipeline has several readers).
        last_batch_policy: what the end of a shard gives when its size is not a multiple of the
            batch size: ``"fill"`` (full batches, the shard's last sample repeated: every rank
            the same count), ``"drop"`` (only full batches of real samples), ``"partial"`` (real
            samples only, the last batch smaller). ``None``: ``"fill"`` when training and
            ``"partial"`` for validate, test and predict (every sample exactly once).
        **pipeline_kwargs: passed to ``pipeline_fn`` (``batch_size``, ``num_threads``,
            ``device_id``, ``seed``, ...), overriding the decorator's.
    """

    def __init__(
        self,
        pipeline_fn: Callable[..., Any],
        output_map: Sequence[str],
        reader_name: str | None = None,
        last_batch_policy: str | None = None,
        **pipeline_kwargs: Any,
    ) -> None:
        _dali()
        _check_pipeline(pipeline_fn)
        _check_arguments(output_map, last_batch_policy, pipeline_kwargs)
        self.pipeline_fn = pipeline_fn
        self.output_map = list(output_map)
        self.reader_name = reader_name
        self.last_batch_policy = last_batch_policy
        self.pipeline_kwargs = pipeline_kwargs
        self.shard_id, self.num_shards, self.training = 0, 1, True
        self._pipe: Any = None
        self._epochs_done = 0  # reader epochs read to their end
        self._runs_done = 0  # pipeline runs of the reader epoch in progress

    # -- what the strategy calls ---------------------------------------------------------------
    def sharded(self, shard_id: int, num_shards: int, training: bool) -> DALILoader:
        """A copy for shard ``shard_id`` of ``num_shards`` (the strategy calls it at setup)."""
        if not 0 <= shard_id < num_shards:
            raise ValueError(f"DALILoader: shard_id={shard_id} must be in 0..{num_shards - 1}.")
        copy = DALILoader(
            self.pipeline_fn, self.output_map, self.reader_name, self.last_batch_policy, **self.pipeline_kwargs
        )
        copy.shard_id, copy.num_shards, copy.training = shard_id, num_shards, training
        return copy

    @property
    def policy(self) -> str:
        """The last-batch policy in effect (``None`` resolved for this stage)."""
        if self.last_batch_policy is not None:
            return self.last_batch_policy
        return "fill" if self.training else "partial"

    @property
    def batch_size(self) -> int:
        """The pipeline's batch size (the micro batch size)."""
        return int(self._pipeline().max_batch_size)

    # -- the epoch ---------------------------------------------------------------------------
    def __len__(self) -> int:
        count = self._plan()[0]
        if count == 0:
            n, shards, size = self._layout()[:3]
            raise ValueError(
                f"DALILoader: last_batch_policy={self.policy!r} gives no batch: the reader's {n} samples "
                f"in {shards} shards leave {n // shards} per shard, fewer than batch_size={size}."
            )
        return count

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        pipe = self._pipeline()
        self._finish_reader_epoch()  # an epoch the loop left early: the reader restarts only at its end
        count, own = self._plan()
        size, runs = self._layout()[2], self._layout()[3]
        for index in range(count):
            outputs = pipe.run()
            self._runs_done += 1
            keep = size if self.policy != "partial" else min(size, own - index * size)
            batch = self._to_torch(outputs, keep)
            if self._runs_done == runs:
                self._epochs_done, self._runs_done = self._epochs_done + 1, 0
            yield batch

    # -- resume --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The reader's position (a DALI checkpoint) and this loader's epoch counters."""
        return {
            "dali_checkpoint": self._pipeline().checkpoint(),
            "epochs_done": self._epochs_done,
            "runs_done": self._runs_done,
            "shard": (self.shard_id, self.num_shards),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Rebuild the pipeline at the position `state_dict` recorded."""
        if tuple(state["shard"]) != (self.shard_id, self.num_shards):
            raise ValueError(
                f"DALILoader: the saved state is shard {tuple(state['shard'])} (shard_id, num_shards), "
                f"this loader is ({self.shard_id}, {self.num_shards})."
            )
        self._pipe = self._build(state["dali_checkpoint"])
        self._epochs_done, self._runs_done = int(state["epochs_done"]), int(state["runs_done"])

    # -- private -------------------------------------------------------------------------------
    def _build(self, checkpoint: bytes | None = None) -> Any:
        dali = _dali()
        pipe = self.pipeline_fn(
            shard_id=self.shard_id,
            num_shards=self.num_shards,
            enable_checkpointing=True,
            checkpoint=checkpoint,
            **self.pipeline_kwargs,
        )
        if not isinstance(pipe, dali.Pipeline):
            raise TypeError(
                f"DALILoader: pipeline_fn returned {type(pipe).__name__}, not a DALI Pipeline: decorate "
                "the definition with @nvidia.dali.pipeline_def."
            )
        pipe.build()
        if pipe.num_outputs != len(self.output_map):
            raise ValueError(
                f"DALILoader: the pipeline has {pipe.num_outputs} outputs but output_map names "
                f"{len(self.output_map)}: {self.output_map}."
            )
        self._check_reader(pipe)
        return pipe

    def _pipeline(self) -> Any:
        if self._pipe is None:
            self._pipe = self._build()
        return self._pipe

    def _reader_meta(self, pipe: Any) -> dict[str, Any]:
        readers = pipe.reader_meta()
        if self.reader_name is not None:
            if self.reader_name not in readers:
                raise ValueError(
                    f"DALILoader: the pipeline has no reader named {self.reader_name!r} (readers: {sorted(readers)})."
                )
            meta: dict[str, Any] = readers[self.reader_name]  # DALI is not type-checked: a reader's meta dict
            return meta
        if len(readers) != 1:
            raise ValueError(
                "DALILoader: the pipeline must have one reader (fn.readers.*) to define the epoch, "
                f"or name one with reader_name=; it has {len(readers)}: {sorted(readers)}."
            )
        return next(iter(readers.values()))

    def _check_reader(self, pipe: Any) -> None:
        meta = self._reader_meta(pipe)
        if (meta["shard_id"], meta["number_of_shards"]) != (self.shard_id, self.num_shards):
            raise ValueError(
                f"DALILoader: the reader reads shard {meta['shard_id']} of {meta['number_of_shards']}, "
                f"but this rank is shard {self.shard_id} of {self.num_shards}: pass the pipeline "
                "definition's shard_id and num_shards to the reader."
            )
        if not meta["pad_last_batch"]:
            raise ValueError(
                "DALILoader: give the reader pad_last_batch=True. Without it a reader epoch does not "
                "end on a batch boundary: the next epoch begins with the rest of the last batch, and "
                "the ranks' epochs drift apart."
            )

    def _layout(self) -> tuple[int, int, int, int, bool]:
        """(samples, shards, batch size, pipeline runs per reader epoch, stick_to_shard)."""
        pipe = self._pipeline()
        meta = self._reader_meta(pipe)
        n, shards, size = int(meta["epoch_size"]), int(meta["number_of_shards"]), int(pipe.max_batch_size)
        padded_shard = -(-n // shards)  # pad_last_batch pads every shard to the largest one's size
        return n, shards, size, -(-padded_shard // size), bool(meta["stick_to_shard"])

    def _plan(self) -> tuple[int, int]:
        """(batches the next epoch yields, real samples in the shard it reads)."""
        n, shards, size, runs, stick = self._layout()
        epoch = self._epochs_done + (1 if self._runs_done else 0)
        shard = self.shard_id if stick else (self.shard_id + epoch) % shards  # DALI moves on a shard per epoch
        own = (shard + 1) * n // shards - shard * n // shards
        smallest = n // shards
        if self.policy == "fill":
            return runs, own
        if self.policy == "drop":
            return smallest // size, own
        # partial: training runs the smallest shard's count on every rank; evaluation reads its own
        return -(-(smallest if self.training else own) // size), own

    def _finish_reader_epoch(self) -> None:
        runs = self._layout()[3]
        while self._runs_done:
            self._pipe.run()
            self._runs_done += 1
            if self._runs_done == runs:
                self._epochs_done, self._runs_done = self._epochs_done + 1, 0

    def _to_torch(self, outputs: Sequence[Any], keep: int) -> dict[str, torch.Tensor]:
        from nvidia.dali.plugin.pytorch import feed_ndarray, to_torch_type

        batch = {}
        for name, output in zip(self.output_map, outputs):
            if not output.is_dense_tensor():
                raise ValueError(
                    f"DALILoader: the samples of output {name!r} have different shapes; give them one "
                    "shape in the pipeline (fn.resize, fn.crop, fn.pad) to form a batch tensor."
                )
            tensor = output.as_tensor()
            on_gpu = hasattr(output, "device_id")  # a TensorListGPU
            device = torch.device("cuda", output.device_id()) if on_gpu else torch.device("cpu")
            out = torch.empty(tensor.shape(), dtype=to_torch_type[tensor.dtype], device=device)
            stream = torch.cuda.current_stream(device) if on_gpu else None
            feed_ndarray(tensor, out, cuda_stream=stream)
            batch[name] = out[:keep] if keep < out.shape[0] else out
        return batch
