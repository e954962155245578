"""The ``gyre`` command (also ``python -m gyre``).

``gyre fit`` trains the digits demo (:func:`gyre.demo.fit_digits`) and prints where its run
folder is and the final test accuracy. Plain ``gyre`` prints the help.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, received {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, received {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, received {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, received {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gyre`` command.

    Example:
        >>> args = build_parser().parse_args(["fit", "--epochs", "3"])
        >>> args.command, args.epochs, args.batch_size
        ('fit', 3, 64)
    """
    parser = argparse.ArgumentParser(
        prog="gyre",
        description="gyre: training loops for JAX.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    fit = commands.add_parser(
        "fit",
        help="train an MLP on the digits data set (the demo)",
        description="Train a 64-256-256-10 MLP on scikit-learn's digits with gyre.train_loop. "
        "Writes <out>/<timestamp>/ with history.csv, curves.png and checkpoints/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    fit.add_argument("--epochs", type=_positive_int, default=15, help="passes over the training set")
    fit.add_argument("--batch-size", type=_positive_int, default=64, help="samples per step")
    fit.add_argument("--learning-rate", type=_positive_float, default=1e-3, help="Adam's learning rate")
    fit.add_argument("--seed", type=int, default=0, help="seed of the split, shuffles and initial parameters")
    fit.add_argument("--out", default="runs", help="folder that holds the run folders")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _fit(args: argparse.Namespace) -> int:
    from gyre.demo import fit_digits

    result = fit_digits(
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        out=args.out,
        quiet=args.quiet,
    )
    steps, epochs = result.elapsed.steps, result.elapsed.epochs
    print(f"run folder: {result.run_dir}")
    print(f"trained {steps} steps ({epochs} epochs) in {result.seconds:.1f}s")
    print(f"final test accuracy: {result.test_accuracy:.4f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``gyre`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stdout(io.StringIO()) as out:
        ...     code = main([])
        >>> code, out.getvalue().startswith("usage: gyre")
        (0, True)
    """
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command == "fit":
        return _fit(args)
    parser.print_help()
    return 0
