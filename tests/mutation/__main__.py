"""``python -m tests.mutation``: apply the mutants, run the tests of each area, report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.mutation.mutants import MUTANTS
from tests.mutation.runner import KILLED, anchor_problem, markdown, run_all

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__)
    parser.add_argument("--list", action="store_true", help="list the mutants (and whether their anchors hold) and exit")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this mutant (repeatable; an area name runs the area)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one mutant's tests (default 900)")
    parser.add_argument("--baseline", action="store_true", help="first run each test set unmutated (a failing one makes its mutants 'error')")
    parser.add_argument("--report", metavar="FILE", help="also write the results as a Markdown table")
    parser.add_argument("--pytest-arg", action="append", default=[], metavar="ARG", help="extra pytest argument (repeatable), e.g. -n2")
    args = parser.parse_args(argv)

    chosen = [m for m in MUTANTS if not args.only or m.name in args.only or m.area in args.only]
    unknown = sorted(set(args.only) - {m.name for m in MUTANTS} - {m.area for m in MUTANTS})
    if unknown:
        parser.error(f"no mutant or area named {unknown}; see --list")
    if args.list:
        for m in chosen:
            problem = anchor_problem(ROOT, m)
            state = f"STALE: {problem}" if problem else "ok"
            print(f"{m.name:40} {m.area:16} {m.path:44} {state}\n    {m.why}\n    tests: {' '.join(m.tests)}")
        return 0

    def report(result):
        print(f"[mutation] {result.mutant.name}: {result.status.upper()} ({result.seconds:.0f} s) {result.detail}", flush=True)

    results = run_all(ROOT, chosen, args.timeout, args.pytest_arg, args.baseline, report)
    table = markdown(results)
    print("\n" + table)
    if args.report:
        Path(args.report).write_text(table + "\n")
    return 0 if all(r.status == KILLED for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
