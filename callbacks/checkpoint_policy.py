"""`ModelCheckpoint`'s decisions as pure functions: when a training batch saves (the step and
time schedule), which checkpoint a save writes, which one it deletes, whether ``last.ckpt``
follows, and the top-k books afterwards.

Nothing here touches a file or the Trainer: the callback scores the monitored metric, gives the
names (`Names`: its file-name template and version counter, which look at the disk) and carries
out the `Save` it gets back (writes, links, deletes).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional, Protocol, Union


@dataclasses.dataclass(frozen=True)
class TopK:
    """A checkpoint callback's books: the kept checkpoints and their scores, the best and the
    worst kept one, and the last checkpoint written."""

    # a dict: `ModelCheckpoint.best_k_models` is this very dict, which libraries write into
    best_k_models: dict[str, float] = dataclasses.field(default_factory=dict)
    best_model_path: str = ""
    best_model_score: Optional[float] = None
    current_score: Optional[float] = None
    kth_best_model_path: str = ""
    kth_value: float = math.inf
    last_model_path: str = ""


@dataclasses.dataclass(frozen=True)
class Policy:
    """What to keep: ``save_top_k`` checkpoints ranked by ``monitor`` in ``mode`` (None: the
    latest), and ``save_last`` (True, False or ``"link"``)."""

    monitor: Optional[str]
    mode: str
    save_top_k: int
    save_last: Union[bool, str, None]

    def better(self, score: float, reference: float) -> bool:
        """Whether ``score`` beats ``reference`` in this policy's mode."""
        return score < reference if self.mode == "min" else score > reference


@dataclasses.dataclass(frozen=True)
class Save:
    """One save's decision: the checkpoint to write (None: none), ``last.ckpt`` to write (or to
    link to ``link_to``), the files to delete once the new one is on disk, and the books after."""

    save_path: Optional[str]
    last_path: Optional[str]
    link_to: Optional[str]
    delete: tuple[str, ...]
    books: TopK
    message: str


class Names(Protocol):
    """The file names a save may take (they depend on the disk: names of other runs' files are
    versioned past)."""

    def checkpoint(self, taken: Mapping[str, float], replaceable: Optional[str]) -> str:
        """This save's checkpoint path, clobbering no file of ``taken`` except ``replaceable``."""

    def last(self, taken: Mapping[str, float]) -> str:
        """Where ``last.ckpt`` goes, given the checkpoints ``taken``."""


def decide(
    books: TopK, policy: Policy, score: Optional[float], top_k: bool, last: str, newest: str, names: Names
) -> Save:
    """The decision of one save.

    ``score``: the monitored value now (None: no monitor, or nothing to rank by yet; NaN already
    made the worst); ``top_k``: this save may keep a top-k checkpoint; ``last``: ``"always"``
    write ``last.ckpt`` (when ``save_last``) or ``"if_saved"`` (only with a new checkpoint, or to
    re-link); ``newest``: the newest checkpoint written so far (what a link points to).
    """
    if score is not None:
        books = dataclasses.replace(books, current_score=score)
    books, save_path, delete, message = _top_k(books, policy, score, top_k, names)
    last_path = names.last(books.best_k_models)
    link_to = _last_link(policy, last, save_path, save_path or newest)
    if link_to is None:
        return Save(save_path, None, None, delete, books, message)
    books = dataclasses.replace(books, last_model_path=last_path)
    return Save(save_path, last_path, link_to or None, delete, books, message)


def _top_k(
    books: TopK, policy: Policy, score: Optional[float], top_k: bool, names: Names
) -> tuple[TopK, Optional[str], tuple[str, ...], str]:
    """The top-k part of a save: the books after, the checkpoint to write (None: none), what to delete."""
    if not top_k or policy.save_top_k == 0:
        return books, None, (), ""
    if policy.monitor is None:
        return _keep_latest(books, policy, names)
    if score is None:
        return books, None, (), ""
    return _keep_best(books, policy, score, names)


def _last_link(policy: Policy, last: str, save_path: Optional[str], newest: str) -> Optional[str]:
    """Whether this save writes ``last.ckpt``: None if not; else what it links to ("" for a copy)."""
    link = policy.save_last == "link" and bool(newest) and policy.save_top_k != 0
    if not policy.save_last or not (last == "always" or save_path is not None or link):
        return None
    return newest if link else ""


def _keep_latest(books: TopK, policy: Policy, names: Names) -> tuple[TopK, str, tuple[str, ...], str]:
    """Without a monitor the newest checkpoint is the best (``save_top_k=1`` replaces the last one)."""
    evict = [p for p in books.best_k_models if policy.save_top_k == 1]
    save_path = names.checkpoint(books.best_k_models, evict[0] if evict else None)
    kept = {} if policy.save_top_k == 1 else dict(books.best_k_models)
    kept[save_path] = math.nan
    books = dataclasses.replace(books, best_k_models=kept, best_model_path=save_path)
    return books, save_path, tuple(p for p in evict if p != save_path), f"saving latest model to {save_path}"


def _keep_best(
    books: TopK, policy: Policy, score: float, names: Names
) -> tuple[TopK, Optional[str], tuple[str, ...], str]:
    """A checkpoint enters the top k when there is room or it beats the worst kept one, which it evicts."""
    kept = dict(books.best_k_models)
    k = policy.save_top_k
    if not (k == -1 or len(kept) < k or policy.better(score, books.kth_value)):
        return books, None, (), f"{policy.monitor!r} was not in top {k}"
    evict = books.kth_best_model_path if 0 < k <= len(kept) else None
    save_path = names.checkpoint(kept, evict)
    delete: tuple[str, ...] = ()
    if evict is not None:
        kept.pop(evict, None)
        delete = (evict,) if evict != save_path else ()
    kept[save_path] = score
    books = rank_kept(books, kept, policy.mode)
    message = f"{policy.monitor!r} reached {score:.5g} (best {books.best_model_score:.5g}), saving model to {save_path}"
    return books, save_path, delete, message


def rank_kept(books: TopK, kept: dict[str, float], mode: str) -> TopK:
    """``books`` keeping ``kept``, ranked in ``mode``: the worst kept is the ``kth`` (evicted next),
    the best kept the best; none kept, neither (the ``kth_value`` the worst possible). A save and a
    loaded state (`ModelCheckpoint`, a state naming files it does not own) are ranked here."""
    ranked = sorted(kept.items(), key=lambda kv: float(kv[1]), reverse=mode == "min")
    if not ranked:
        return dataclasses.replace(
            books, best_k_models=kept, kth_best_model_path="", kth_value=worst(mode), best_model_path="", best_model_score=None
        )
    (kth_path, kth_value), (best_path, best_score) = ranked[0], ranked[-1]  # the worst and the best kept
    return dataclasses.replace(
        books, best_k_models=kept, kth_best_model_path=kth_path, kth_value=kth_value,
        best_model_path=best_path, best_model_score=best_score,
    )


def loaded_books(
    state: Mapping[str, Any], mode: str, best_model_path: str, owned: Callable[[str], bool]
) -> tuple[TopK, list[str]]:
    """The books a checkpoint callback's saved ``state`` describes (``best_model_path``: the one
    kept when the state names none), and the paths it names that are not ``owned`` (sorted). Those
    are dropped, and the checkpoints that remain are ranked as a save ranks them (`rank_kept`)."""
    books = TopK(
        best_k_models=dict(state.get("best_k_models", {})),
        best_model_path=state.get("best_model_path", best_model_path),
        best_model_score=state.get("best_model_score"), current_score=state.get("current_score"),
        kth_best_model_path=state.get("kth_best_model_path", ""),
        kth_value=state.get("kth_value", worst(mode)), last_model_path=state.get("last_model_path", ""),
    )
    named = [*books.best_k_models, books.kth_best_model_path, state.get("best_model_path", ""), books.last_model_path]
    foreign = sorted({str(p) for p in named if p and not owned(p)})
    if not foreign:
        return books, []
    books = rank_kept(books, {p: v for p, v in books.best_k_models.items() if str(p) not in foreign}, mode)
    if books.last_model_path in foreign:
        books = dataclasses.replace(books, last_model_path="")
    return books, foreign


def worst(mode: str) -> float:
    """The worst score in ``mode`` (``"min"``: +inf)."""
    return math.inf if mode == "min" else -math.inf


def step_due(step: int, every_n_train_steps: int) -> bool:
    """Whether global step ``step`` saves by ``every_n_train_steps`` (0: no step schedule)."""
    return every_n_train_steps > 0 and step % every_n_train_steps == 0


def time_due(now: float, last_checked: Optional[float], interval_s: Optional[float]) -> bool:
    """Whether ``interval_s`` seconds (None: no time schedule) have passed since ``last_checked``."""
    return interval_s is not None and last_checked is not None and now - last_checked >= interval_s
