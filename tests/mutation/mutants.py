"""The mutants: small semantic edits of the core, each a bug we could write.

A mutant replaces ``anchor`` (exact text, found exactly once in ``path``) by ``replacement`` and
names the ``tests`` of its area, which must fail with it. When a refactor moves the code, the
anchor no longer matches and the mutant reports *stale* instead of passing silently: update the
anchor (tests/project/test_mutants.py fails until then). The first four are the bugs that
survived the suite once (issue 26): each now has a test written to kill it.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    area: str
    path: str
    anchor: str
    replacement: str
    tests: tuple[str, ...]
    why: str


def _m(name: str, area: str, path: str, anchor: str, replacement: str, tests: tuple[str, ...] | str, why: str) -> Mutant:
    return Mutant(name, area, path, anchor, replacement, (tests,) if isinstance(tests, str) else tuple(tests), why)


ACCUMULATION = ("tests/loops/test_accumulation.py",)
DDP_SYNC = ("tests/strategies/test_ddp_accumulation_sync.py",)
RESUME = ("tests/checkpointing/test_checkpoint_resume.py", "tests/checkpointing/test_resume_mid_window.py")
DDP_DATA = ("tests/strategies/test_ddp_data.py",)

MUTANTS: tuple[Mutant, ...] = (
    # -- the four that once survived -------------------------------------------------------------
    _m("resume_mid_window_no_rewind", "resume", "trainer/checkpointing/resume.py",
       "    start = window_start(progress.batches_done, accumulate)\n",
       "    start = progress.batches_done\n",
       "tests/checkpointing/test_resume_mid_window.py",
       "a checkpoint written inside an accumulation window resumes after its last trained micro batch"),
    _m("sync_dist_on_step_sums", "sync_dist", "trainer/metrics/metric_store.py",
       "value = strategy.reduce(e.last, e.reduce) if synced else e.last",
       'value = strategy.reduce(e.last, "sum") if synced else e.last',
       DDP_DATA, "self.log(sync_dist=True, on_step=True) sums over ranks instead of averaging"),
    _m("fsdp_reshard_after_forward_off", "fsdp", "trainer/strategies/fsdp.py",
       '{"mesh": self._mesh(), "reshard_after_forward": self.reshard_after_forward}',
       '{"mesh": self._mesh(), "reshard_after_forward": False}',
       "tests/strategies/test_fsdp_options.py", "FSDP never frees gathered parameters after forward"),
    _m("plateau_steps_on_stale_value", "schedulers", "trainer/loops/optimization.py",
       "        if value is cfg.last_monitored:\n            return None\n", "",
       "tests/loops/test_plateau_scheduler.py",
       "ReduceLROnPlateau steps again on a validation value it already stepped on"),
    # -- accumulation windows ------------------------------------------------------------------
    _m("window_end_off_by_one", "accumulation", "trainer/loops/accumulation_windows.py",
       "return is_last_batch or (batch_idx + 1) % self.accumulate == 0",
       "return is_last_batch or batch_idx % self.accumulate == 0",
       ACCUMULATION, "windows end one micro batch early"),
    _m("short_last_window_divided_by_A", "accumulation", "trainer/loops/accumulation_windows.py",
       "return min(self.accumulate, self.num_batches - window_start(batch_idx, self.accumulate))",
       "return self.accumulate",
       ACCUMULATION, "the epoch's shorter last window is divided by A, not by its size"),
    _m("unknown_length_no_grad_correction", "accumulation", "trainer/loops/accumulation_windows.py",
       "return self.accumulate / in_window", "return 1.0",
       ACCUMULATION, "a loader without a length: the short last window's gradient is not rescaled"),
    _m("loss_not_divided", "accumulation", "trainer/loops/automatic.py",
       "scaled = loss / divisor if divisor != 1 else loss", "scaled = loss",
       ACCUMULATION, "micro-batch losses are summed over the window instead of averaged"),
    # -- no_sync ---------------------------------------------------------------------------------
    _m("no_sync_on_window_end", "no_sync", "trainer/strategies/ddp.py",
       "        if sync or (first and self.ddp_kwargs[\"static_graph\"]):",
       "        if not sync or (first and self.ddp_kwargs[\"static_graph\"]):",
       DDP_SYNC, "DDP syncs the non-final micro batches and skips the window's last all-reduce"),
    _m("no_sync_never", "no_sync", "trainer/strategies/ddp.py",
       "        window: ContextManager[Any] = self.model.no_sync()  # type: ignore[operator]",
       "        window: ContextManager[Any] = NO_CONTEXT",
       DDP_SYNC, "every micro batch all-reduces (correct numbers, A times the communication)"),
    # -- loss normalization ----------------------------------------------------------------------
    _m("num_items_local_count", "loss_normalization", "trainer/loops/loss_normalization.py",
       'total = strategy.reduce(self._items, "sum")', "total = self._items",
       ("tests/loops/test_loss_normalization.py",), "num_items normalizes by this rank's items, not the global count"),
    _m("num_items_without_world_size", "loss_normalization", "trainer/loops/loss_normalization.py",
       "factor = strategy.world_size / total.clamp_min(1.0)", "factor = 1.0 / total.clamp_min(1.0)",
       ("tests/loops/test_loss_normalization.py",), "forgets that DDP already averaged the gradients over W"),
    # -- resume and RNG --------------------------------------------------------------------------
    _m("resume_rng_not_restored", "resume", "trainer/rng.py",
       '    torch.set_rng_state(_cpu_bytes(state["torch"]))\n', "",
       RESUME, "resuming leaves torch's CPU RNG where the new process put it"),
    _m("resume_skips_one_batch_too_many", "resume", "trainer/checkpointing/resume.py",
       "it = iter(self.batch_sampler)\n        for _ in range(self.skip):",
       "it = iter(self.batch_sampler)\n        for _ in range(self.skip + 1):",
       RESUME, "fast-forward drops one untrained batch"),
    _m("resume_sampler_seed_not_restored", "resume", "trainer/checkpointing/resume.py",
       "        sampler.seed = seed\n", "        pass\n",
       ("tests/checkpointing/test_checkpoint_resume.py", "tests/data/test_distributed_sampler.py"),
       "a DistributedSampler's seed is taken from the new process's environment on resume"),
    # -- LR scaling -----------------------------------------------------------------------------
    _m("scale_lr_sqrt_is_linear", "lr_scaling", "trainer/loops/optimization.py",
       "        return math.sqrt(world_size)", "        return float(world_size)",
       ("tests/optim/test_scale_lr_warmup.py", *DDP_DATA), "scale_lr='sqrt' multiplies by W"),
    _m("scale_lr_skips_initial_lr", "lr_scaling", "trainer/loops/optimization.py",
       '                group["initial_lr"] *= factor\n', "                pass\n",
       ("tests/optim/test_scale_lr_warmup.py", *DDP_DATA), "a scheduler's initial_lr is left unscaled"),
    _m("scale_lr_again_on_resume", "lr_scaling", "trainer/loops/fit_loop.py",
       'self.lr_scaled = bool(checkpoint.get("lr_scaled", False))',
       "self.lr_scaled = False",
       "tests/checkpointing/test_checkpoint_resume.py::test_lr_scaling_is_not_applied_twice_and_world_size_may_change",
       "a resumed run records its already scaled rates as unscaled"),
    # -- samplers -------------------------------------------------------------------------------
    _m("no_set_epoch", "samplers", "trainer/strategies/strategy.py",
       "        set_epoch(dataloader, epoch)\n", "        pass\n",
       ("tests/data/test_distributed_sampler.py", *DDP_DATA), "every epoch repeats the first epoch's order"),
    _m("unpadded_sampler_same_seed_every_epoch", "samplers", "trainer/data/distributed_sampler.py",
       "generator.manual_seed(self.seed + self.epoch)", "generator.manual_seed(self.seed)",
       ("tests/data/test_distributed_sampler.py",), "the evaluation sampler ignores set_epoch"),
    _m("unpadded_sampler_overlapping_shards", "samplers", "trainer/data/distributed_sampler.py",
       "return iter(indices[self.rank :: self.num_replicas])",
       "return iter(indices[: len(indices) // self.num_replicas])",
       ("tests/data/test_distributed_sampler.py",), "every rank evaluates the same first samples"),
    _m("train_sampler_not_shuffled", "samplers", "trainer/data/distributed_sampler.py",
       "        shuffle = isinstance(inner, RandomSampler)", "        shuffle = False",
       ("tests/data/test_distributed_sampler.py", *DDP_DATA), "a shuffling loader's shards are not shuffled"),
    # -- SyncBatchNorm --------------------------------------------------------------------------
    _m("syncbn_biased_running_var", "sync_batchnorm", "trainer/strategies/sync_batchnorm.py",
       "unbiased = var.detach() * (count / (count - 1))", "unbiased = var.detach()",
       ("tests/strategies/test_sync_batchnorm.py",), "running_var keeps the biased batch variance"),
    _m("syncbn_local_count", "sync_batchnorm", "trainer/strategies/sync_batchnorm.py",
       "count = sum_and_count[-1].detach()", "count = local_count[0].detach()",
       ("tests/strategies/test_sync_batchnorm.py",), "the mean divides the global sum by the local count"),
    # -- sync_dist and collectives --------------------------------------------------------------
    _m("reduce_mean_is_sum", "sync_dist", "trainer/strategies/process_group.py",
       "        if op == \"mean\":\n            out /= self.world_size\n", "",
       DDP_DATA, "strategy.reduce(op='mean') returns the sum"),
    # -- top-k checkpoints ---------------------------------------------------------------------
    _m("topk_better_inverted", "top_k", "callbacks/checkpoint_policy.py",
       'return score < reference if self.mode == "min" else score > reference',
       'return score > reference if self.mode == "min" else score < reference',
       ("tests/callbacks/test_model_checkpoint.py", "tests/callbacks/test_checkpoint_policy.py"),
       "mode='min' keeps the worst checkpoints"),
    _m("topk_kth_is_the_best", "top_k", "callbacks/checkpoint_policy.py",
       "(kth_path, kth_value), (best_path, best_score) = ranked[0], ranked[-1]  # the worst and the best kept",
       "(kth_path, kth_value), (best_path, best_score) = ranked[-1], ranked[-1]",
       ("tests/callbacks/test_model_checkpoint.py", "tests/callbacks/test_checkpoint_policy.py"),
       "the best kept checkpoint is the one evicted next"),
    # -- early stopping --------------------------------------------------------------------------
    _m("early_stopping_min_delta_ignored", "early_stopping", "callbacks/early_stopping.py",
       'delta = -self.min_delta if self.mode == "min" else self.min_delta',
       "delta = 0.0", ("tests/callbacks/test_early_stopping.py",), "any improvement counts, however small"),
    _m("early_stopping_wait_not_reset", "early_stopping", "callbacks/early_stopping.py",
       "            self.best_score = current\n            self.wait_count = 0\n",
       "            self.best_score = current\n",
       ("tests/callbacks/test_early_stopping.py",), "patience counts checks since the start, not since the last improvement"),
    _m("early_stopping_value_not_averaged", "early_stopping", "callbacks/early_stopping.py",
       "current = _to_float(trainer.strategy.reduce(local.to(trainer.strategy.root_device), op=\"mean\"))",
       "current = _to_float(local)",
       ("tests/callbacks/test_callbacks_distributed.py",),
       "each rank decides on its own value of a metric logged without sync_dist"),
    _m("early_stopping_rank_local", "early_stopping", "callbacks/early_stopping.py",
       "should_stop = bool(trainer.strategy.reduce_boolean_decision(should_stop, all=False))",
       "should_stop = bool(should_stop)",
       ("tests/callbacks/test_early_stopping.py", "tests/callbacks/test_callbacks_distributed.py"),
       "a rank stops alone (the others would wait in a collective)"),
    # -- atomic writes -------------------------------------------------------------------------
    _m("checkpoint_written_in_place", "atomic_writes", "trainer/checkpoint_io/file_format.py",
       "    fd, tmp = _create_temp_file(path)\n",
       "    fd, tmp = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), str(path)\n",
       ("tests/checkpointing/test_checkpoint_files.py",), "a checkpoint is written over the old file in place"),
    _m("checkpoint_no_fsync", "atomic_writes", "trainer/checkpoint_io/file_format.py",
       "            os.fsync(f.fileno())\n", "            pass\n",
       ("tests/checkpointing/test_checkpoint_files.py",), "the bytes are not on disk before the rename"),
    # -- optimizers -----------------------------------------------------------------------------
    _m("lamb_no_bias_correction", "optimizers", "trainer/optim/lamb.py",
       "update = torch._foreach_div(exp_avgs, [1 - beta1**t for t in steps])",
       "update = [m.clone() for m in exp_avgs]",
       ("tests/optim/test_optim_lamb.py",), "LAMB forgets the first moment's bias correction"),
    _m("lamb_trust_ratio_inverted", "optimizers", "trainer/optim/lamb.py",
       "w_norm / u_norm, torch.ones_like(w_norm)", "u_norm / w_norm, torch.ones_like(w_norm)",
       ("tests/optim/test_optim_lamb.py",), "LAMB's trust ratio is ||u|| / ||w||"),
    _m("lars_weight_decay_missing_in_rate", "optimizers", "trainer/optim/lars.py",
       'g_norm + group["weight_decay"] * w_norm + group["eps"]', 'g_norm + group["eps"]',
       ("tests/optim/test_optim_lars.py",), "LARS's local rate ignores weight decay"),
    _m("novograd_first_step_decayed", "optimizers", "trainer/optim/novograd.py",
       "torch._foreach_addcmul_([exp_avg_sqs[i] for i in first], first_n, first_n, value=1.0)",
       "torch._foreach_addcmul_([exp_avg_sqs[i] for i in first], first_n, first_n, value=1 - beta2)",
       ("tests/optim/test_optim_novograd.py",), "NovoGrad's second moment starts at (1 - beta2) ||g||^2"),
    _m("novograd_grad_averaging_inverted", "optimizers", "trainer/optim/novograd.py",
       'alpha=(1 - beta1) if group["grad_averaging"] else 1.0',
       'alpha=1.0 if group["grad_averaging"] else (1 - beta1)',
       ("tests/optim/test_optim_novograd.py",), "grad_averaging does the opposite of what it says"),
    # -- FSDP -----------------------------------------------------------------------------------
    _m("fsdp_bf16_reduces_in_bf16", "fsdp", "trainer/strategies/fsdp.py",
       "param_dtype=torch.bfloat16, reduce_dtype=torch.float32", "param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16",
       ("tests/strategies/test_fsdp_training.py",), "bf16-mixed reduce-scatters gradients in bf16"),
    _m("fsdp_blocks_not_sharded", "fsdp", "trainer/strategies/fsdp.py",
       "            if self._should_shard(sub):\n                fsdp.fully_shard(sub, **kwargs)\n",
       "            pass\n",
       ("tests/strategies/test_fsdp_options.py",), "auto_wrap_policy is ignored: one unit for the whole model"),
    # -- failure naming --------------------------------------------------------------------------
    _m("failure_notes_last_first", "failure_naming", "trainer/launch/failure_notes.py",
       'return sorted(notes, key=lambda n: (n["time"], n["rank"]))',
       'return sorted(notes, key=lambda n: (-n["time"], n["rank"]))',
       ("tests/launch/test_launch_lifecycle.py::test_the_peer_named_is_the_one_that_failed_first",
        "tests/launch/test_fault_tolerance.py"), "the rank that failed last is named as the cause"),
    _m("survivor_names_no_peer", "failure_naming", "trainer/launch/failure_notes.py",
       "    own = not is_collective_failure(exc)\n",
       "    return None\n",
       ("tests/faults/test_fault_matrix.py::test_fault[raise_callback-forked]",
        "tests/faults/test_fault_matrix.py::test_fault[nan_loss-forked]"),
       "a rank whose collective broke raises its own gloo error instead of naming the failed peer"),
)
