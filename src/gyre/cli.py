"""The ``gyre`` command (also ``python -m gyre``).

``gyre fit`` trains the digits demo (:func:`gyre._demo.fit_digits`) and prints where its run
folder is and the final test accuracy. Plain ``gyre`` prints the help.

A mistake in the options (a batch larger than the data set, ``--out`` naming a file or a
folder that cannot be written, a negative seed, a learning rate that is not a finite number)
is reported as a usage error, exit code 2, before any training, never as a traceback. A
training that diverges (a NaN or infinite loss or metric: :class:`gyre.NonFiniteError`)
stops at once and exits with code 3, printing the error's explanation (the step, the entry,
the fix) and the run folder, whose checkpoints hold no state made after the divergence.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

MAX_SEED = 2**63 - 1  # what jax.random.key takes (kept equal to gyre._demo.MAX_SEED)

#: Exit codes of the ``gyre`` command.
EXIT_OK = 0
EXIT_USAGE = 2  # an option that cannot work (argparse's code)
EXIT_NON_FINITE = 3  # the training diverged: a NaN or infinite loss or metric
EXIT_PREEMPTED = 75  # SIGTERM (or Ctrl-C): the step finished and was saved (EX_TEMPFAIL)

EXIT_CODES = f"""exit codes:
  {EXIT_OK}  the command succeeded
  {EXIT_USAGE}  usage error: an option that cannot work, reported before any training
  {EXIT_NON_FINITE}  the training diverged: a loss or metric became NaN or infinite (the message
     names the step and the entry; the run's checkpoints hold no state made after it)
  {EXIT_PREEMPTED} preempted: SIGTERM (or Ctrl-C) arrived; the current step finished and was
     saved; continue with gyre fit --resume RUN_FOLDER (a second signal stops at once)"""


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
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, received {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 0 to {MAX_SEED}, received {text!r}"
        )
    return value


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Option defaults shown, the epilog (the exit codes) kept as written."""


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
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    fit = commands.add_parser(
        "fit",
        help="train an MLP on the digits data set (the demo)",
        description="Train a 64-256-256-10 MLP on scikit-learn's digits with gyre.train_loop. "
        "Writes <out>/<timestamp>/ with history.csv, curves.png, tensorboard/ and checkpoints/.",
        epilog=EXIT_CODES,
        formatter_class=_HelpFormatter,
    )
    fit.add_argument("--epochs", type=_positive_int, default=15, help="passes over the training set")
    fit.add_argument("--batch-size", type=_positive_int, default=64, help="samples per step")
    fit.add_argument("--learning-rate", type=_positive_float, default=1e-3, help="Adam's learning rate")
    fit.add_argument("--seed", type=_seed, default=0, help="seed of the split, shuffles and initial parameters")
    fit.add_argument("--out", default="runs", help="folder that holds the run folders")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    fit.add_argument(
        "--resume", metavar="RUN_FOLDER", default=None,
        help="continue a stopped run (SIGTERM, a crash) in its run folder, from its newest good "
        "checkpoint, exactly as if it had never stopped; pass the same options",
    )
    fit.set_defaults(command_parser=fit)
    return parser


def _fit(args: argparse.Namespace) -> int:
    from gyre import _demo as demo
    from gyre.loop import NonFiniteError

    try:
        result = demo.fit_digits(
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            seed=args.seed,
            out=args.out,
            quiet=args.quiet,
            resume=args.resume,
        )
    except demo.DemoArgumentError as err:  # raised before training: a usage error
        option = "--" + err.argument.replace("_", "-")
        args.command_parser.error(f"argument {option}: {err.summary}")
    except NonFiniteError as err:  # the training diverged: say where, and how to fix it
        notes = "".join(f"\n{note}" for note in getattr(err, "__notes__", ()))
        print(f"gyre fit: error: {err}{notes}", file=sys.stderr)
        return EXIT_NON_FINITE
    steps, epochs = result.elapsed.steps, result.elapsed.epochs
    print(f"run folder: {result.run_dir}")
    if result.preempted:
        print(f"preempted after {steps} steps, saved; continue with: gyre fit --resume {result.run_dir}")
        return EXIT_PREEMPTED
    print(f"trained {steps} steps ({epochs} epochs) in {result.seconds:.1f}s")
    print(f"final test accuracy: {result.test_accuracy:.4f}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``gyre`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    A usage error (an option that cannot work) prints the usage line and one message to
    stderr and exits with code 2, as ``argparse`` does. A training that diverges (a NaN or
    infinite loss or metric) returns 3 after printing the explanation to stderr.

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stdout(io.StringIO()) as out:
        ...     code = main([])
        >>> code, out.getvalue().startswith("usage: gyre")
        (0, True)
        >>> with contextlib.redirect_stderr(io.StringIO()) as err:
        ...     try:
        ...         main(["fit", "--seed", "-1"])
        ...     except SystemExit as exit:
        ...         print(exit.code)
        2
        >>> print(err.getvalue().splitlines()[-1])
        gyre fit: error: argument --seed: expected a whole number from 0 to 9223372036854775807, received '-1'
    """
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command == "fit":
        return _fit(args)
    parser.print_help()
    return EXIT_OK
