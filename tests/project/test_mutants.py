"""The mutation tool (`python -m tests.mutation`) stays true: every mutant's anchor text is in the
tree (a refactor that moves the code must move the anchor too), and the runner tells killed,
survived and stale apart. The mutation run itself is not part of the suite."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutation.__main__ import main
from tests.mutation.mutants import MUTANTS, Mutant
from tests.mutation.runner import ERROR, KILLED, STALE, SURVIVED, anchor_problem, markdown, run_all

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_anchor_is_in_the_tree_exactly_once():
    stale = {m.name: anchor_problem(ROOT, m) for m in MUTANTS}
    assert {name: why for name, why in stale.items() if why} == {}


def test_mutants_are_distinct_edits_with_tests():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    for m in MUTANTS:
        assert m.anchor != m.replacement and m.tests and m.why, m.name
    # the four bugs that once survived the suite (issue 26) stay in the list
    assert {"resume_mid_window_no_rewind", "sync_dist_on_step_sums", "fsdp_reshard_after_forward_off",
            "plateau_steps_on_stale_value"} <= set(names)


def _toy_checkout(root: Path) -> None:
    (root / "calc.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef unused():\n    return 1\n")
    (root / "test_calc.py").write_text("from calc import mean\n\n\ndef test_mean():\n    assert mean([1, 3]) == 2\n")


@pytest.mark.timeout(120)
@pytest.mark.launches
def test_the_runner_reports_killed_survived_stale_and_broken_mutants(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the toy's pytest runs need no plugin
    _toy_checkout(tmp_path)
    toy = [
        Mutant("caught", "toy", "calc.py", "/ len(xs)", "/ 2 / len(xs)", ("test_calc.py",), "halves the mean"),
        Mutant("missed", "toy", "calc.py", "return 1", "return 2", ("test_calc.py",), "nothing tests it"),
        Mutant("moved", "toy", "calc.py", "def average(", "def avg(", ("test_calc.py",), "the code moved"),
        Mutant("syntax", "toy", "calc.py", "def mean(xs):", "def mean(xs)", ("test_calc.py",), "not semantic"),
    ]
    results = run_all(tmp_path, toy, timeout=60)
    assert [r.status for r in results] == [KILLED, SURVIVED, STALE, ERROR]
    assert "test_calc.py::test_mean" in results[0].detail
    assert "'def average('... is not in calc.py" in results[2].detail
    assert (tmp_path / "calc.py").read_text().count("/ len(xs)") == 1  # the checkout itself is untouched
    assert markdown(results).endswith("4 mutants: 1 killed, 1 survived, 1 stale, 1 error")


def test_the_command_lists_mutants_and_refuses_unknown_names(capsys):
    assert main(["--list", "--only", "resume"]) == 0
    out = capsys.readouterr().out
    assert "resume_mid_window_no_rewind" in out and "sync_dist_on_step_sums" not in out
    with pytest.raises(SystemExit):
        main(["--only", "no_such_mutant"])
