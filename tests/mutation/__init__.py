"""Mutation testing of the core: ``python -m tests.mutation [--list] [--only NAME ...]``.

Each mutant (`tests/mutation/mutants.py`) is one small semantic edit of a core module, a bug we
could write, anchored by the exact text it replaces. The runner (`tests/mutation/runner.py`)
copies the checkout to a scratch directory, applies one mutant at a time and runs the tests of
its area there: a failing test *kills* the mutant, a passing run lets it *survive* (a gap in the
tests), and a mutant whose anchor text is no longer in the tree is *stale* (the code moved: fix
the anchor). Not part of the default suite; tests/project/test_mutants.py keeps the anchors true.
"""
