"""`checkpoint_policy`: ModelCheckpoint's schedule, top-k and ``last.ckpt`` decisions as pure
functions, checked without a Trainer or a file (the end-to-end behaviour, against Lightning, is in
test_model_checkpoint.py and test_checkpoint_parity.py)."""
from __future__ import annotations

import math

from callbacks.checkpoint_policy import Policy, TopK, decide, step_due, time_due


class _Names:
    """Checkpoint names ck1.ckpt, ck2.ckpt, ... (a replaceable name is reused, as the version counter does)."""

    def __init__(self):
        self.count = 0

    def checkpoint(self, taken, replaceable):
        self.count += 1
        return f"ck{self.count}.ckpt"

    def last(self, taken):
        return "last.ckpt"


def _run(policy, scores, last="if_saved", books=None):
    books, names, saves = books or TopK(kth_value=math.inf if policy.mode == "min" else -math.inf), _Names(), []
    for score in scores:
        save = decide(books, policy, score, True, last, saves[-1].save_path or "" if saves else "", names)
        saves.append(save)
        books = save.books
    return saves


def test_top_2_by_a_minimum_keeps_the_two_best_and_evicts_the_worst():
    saves = _run(Policy("val_loss", "min", 2, False), [5.0, 3.0, 4.0, 6.0])
    assert [s.save_path for s in saves] == ["ck1.ckpt", "ck2.ckpt", "ck3.ckpt", None]
    assert [s.delete for s in saves] == [(), (), ("ck1.ckpt",), ()]  # 4.0 evicts 5.0
    books = saves[-1].books
    assert dict(books.best_k_models) == {"ck2.ckpt": 3.0, "ck3.ckpt": 4.0}
    assert (books.best_model_path, books.best_model_score) == ("ck2.ckpt", 3.0)
    assert (books.kth_best_model_path, books.kth_value) == ("ck3.ckpt", 4.0)
    assert books.current_score == 6.0 and saves[-1].message == "'val_loss' was not in top 2"
    assert saves[2].message == "'val_loss' reached 4 (best 3), saving model to ck3.ckpt"


def test_a_maximum_ranks_the_other_way():
    saves = _run(Policy("acc", "max", 1, False), [0.5, 0.4, 0.9])
    assert [s.save_path for s in saves] == ["ck1.ckpt", None, "ck2.ckpt"]
    assert saves[-1].delete == ("ck1.ckpt",) and saves[-1].books.best_model_score == 0.9


def test_without_a_monitor_the_latest_is_kept():
    one = _run(Policy(None, "min", 1, False), [None, None])
    assert [s.delete for s in one] == [(), ("ck1.ckpt",)] and list(one[-1].books.best_k_models) == ["ck2.ckpt"]
    assert math.isnan(one[-1].books.best_k_models["ck2.ckpt"]) and one[-1].books.best_model_path == "ck2.ckpt"
    every = _run(Policy(None, "min", -1, False), [None, None, None])
    assert list(every[-1].books.best_k_models) == ["ck1.ckpt", "ck2.ckpt", "ck3.ckpt"] and not any(s.delete for s in every)


def test_last_follows_a_save_always_or_as_a_link():
    policy = Policy("val_loss", "min", 0, True)  # save_top_k=0: only last.ckpt
    always = decide(TopK(), policy, 1.0, True, "always", "", _Names())
    assert always.save_path is None and always.last_path == "last.ckpt" and always.books.last_model_path == "last.ckpt"
    assert decide(TopK(), policy, 1.0, True, "if_saved", "", _Names()).last_path is None
    link = decide(TopK(kth_value=math.inf), Policy("val_loss", "min", 1, "link"), 1.0, True, "if_saved", "", _Names())
    assert (link.save_path, link.last_path, link.link_to) == ("ck1.ckpt", "last.ckpt", "ck1.ckpt")
    relink = decide(link.books, Policy("val_loss", "min", 1, "link"), None, False, "if_saved", "ck1.ckpt", _Names())
    assert (relink.save_path, relink.link_to) == (None, "ck1.ckpt")  # an epoch end re-links to the newest


def test_nothing_to_rank_by_yet_saves_nothing_and_changes_no_books():
    books = TopK(best_k_models={"a.ckpt": 1.0}, kth_best_model_path="a.ckpt", kth_value=1.0, current_score=1.0)
    save = decide(books, Policy("val_loss", "min", 1, False), None, True, "if_saved", "", _Names())
    assert save.save_path is None and save.books == books and save.delete == ()


def test_the_books_given_are_not_changed():
    books = TopK(best_k_models={"a.ckpt": 2.0}, kth_best_model_path="a.ckpt", kth_value=2.0)
    decide(books, Policy("val_loss", "min", 1, True), 1.0, True, "always", "", _Names())
    assert dict(books.best_k_models) == {"a.ckpt": 2.0} and books.kth_value == 2.0 and books.last_model_path == ""


def test_the_step_schedule_saves_every_n_steps_and_none_without_one():
    assert [step for step in range(1, 10) if step_due(step, 3)] == [3, 6, 9]
    assert not any(step_due(step, 0) for step in range(1, 10))


def test_the_time_schedule_saves_once_the_interval_has_passed_since_the_last_check():
    assert time_due(10.0, 5.0, 5.0) and not time_due(9.9, 5.0, 5.0)
    assert not time_due(100.0, None, 5.0)  # training has not started: nothing to measure from
    assert not time_due(100.0, 5.0, None)  # no time schedule
