"""The ``gyre`` command (also ``python -m gyre``): ``fit CONFIG [key=value ...]``, ``resume
RUN``, ``test RUN`` and ``config CONFIG``, a thin shell over :mod:`gyre.trainer._run`;
``gyre fit`` with no config trains the digits demo (:func:`gyre._demo.fit_digits`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from gyre._demo import MAX_SEED as MAX_SEED  # the CLI checks --seed with the demo's bound
from gyre._demo import OPTIONS, check_option
from gyre._version import __version__

#: Exit codes of the ``gyre`` command.
EXIT_OK = 0
EXIT_USAGE = 2  # an option that cannot work (argparse's code)
EXIT_NON_FINITE = 3  # the training diverged: a NaN or infinite loss or metric
EXIT_PREEMPTED = 75  # SIGTERM (or Ctrl-C): the step finished and was saved (EX_TEMPFAIL)

EXIT_CODES = f"""exit codes:
  {EXIT_OK}  the command succeeded
  {EXIT_USAGE}  usage error: an option or a config that cannot work (a missing file, bad YAML, an
     unknown key or class_name, a malformed override), explained, without a traceback
  {EXIT_NON_FINITE}  the training diverged: a loss or metric became NaN or infinite (the message
     names the step and the entry; the run's checkpoints hold no state made after it)
  {EXIT_PREEMPTED} preempted: SIGTERM (or Ctrl-C) arrived; the current step finished and was
     saved; continue with gyre resume RUN_FOLDER (the demo too: it reads the run's own
     config.yaml); a second signal stops at once"""


def _demo_option(name: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type``: the text converted, then checked as the demo checks its option ``name``."""

    def parse(text: str) -> Any:
        try:
            return check_option(name, convert(text))
        except ValueError:  # a DemoArgumentError too
            raise argparse.ArgumentTypeError(f"expected {OPTIONS[name].wanted}, received {text!r}") from None

    return parse


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows option defaults (not ``None`` nor ``[]``); keeps description and epilog as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default == []:
            return action.help
        return super()._get_help_string(action)


class _Given(argparse.Action):
    """Stores the value, remembering the option was given (refused beside a config)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.demo_options = (*getattr(namespace, "demo_options", ()), self.option_strings[0])


_OVERRIDES_HELP = ("dotted.key=value overrides of the config, e.g. trainer.train_epochs=3 optimizer.learning_rate=1e-3; "
                   "~dotted.key removes a key, e.g. ~trainer.callbacks.LearningRateMonitor (=null keeps a callback)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gyre`` command.

    Example:
        >>> args = build_parser().parse_args(["fit", "run.yaml", "trainer.seed=1"])
        >>> args.command, args.config, args.overrides
        ('fit', 'run.yaml', ['trainer.seed=1'])
    """
    parser = argparse.ArgumentParser(
        prog="gyre",
        description="gyre: training loops for JAX.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gyre {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        sub = subparsers.add_parser(name, help=summary, description=description, epilog=EXIT_CODES,
                                    formatter_class=_HelpFormatter)
        sub.set_defaults(command_parser=sub)
        return sub

    fit = command(
        "fit", "train from a YAML config (without one: an MLP on the digits data set, the demo)",
        "With CONFIG: train what the YAML config describes (its trainer, model, optimizer\n"
        "and dataset sections), test the best checkpoint, and print the test metrics. The run\n"
        "folder (trainer.logger.log_dir, else <out>/<timestamp>/) holds config.yaml, checkpoints/,\n"
        "resume/, metrics/, the writer's logs, history.csv and curves.png.\n"
        "Without CONFIG: the digits demo, a 64-256-256-10 MLP trained with Adam (the options below).",
    )
    fit.add_argument("config", nargs="?", default=None, metavar="CONFIG", help="a YAML config (none: the demo)")
    fit.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    fit.add_argument("--out", default="runs", help="folder that holds the run folders")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    demo = fit.add_argument_group("the digits demo (without CONFIG)")
    for name, convert, summary in (
        ("epochs", int, "passes over the training set"), ("batch_size", int, "samples per step"),
        ("learning_rate", float, "Adam's learning rate"),
        ("seed", int, "seed of the validation split, the shuffles and the initial parameters"),
    ):
        demo.add_argument("--" + name.replace("_", "-"), type=_demo_option(name, convert),
                          default=OPTIONS[name].default, action=_Given, help=summary)
    demo.add_argument(
        "--resume", metavar="RUN_FOLDER", default=None, action=_Given,
        help="continue a stopped demo run (SIGTERM, a crash) in its run folder, from its newest good "
        "checkpoint, exactly as if it had never stopped, with the run's own options (as gyre resume "
        "RUN_FOLDER); --epochs and --learning-rate given here change them, --batch-size and --seed "
        "cannot (they would change the data)",
    )
    fit.set_defaults(demo_options=())

    resume = command(
        "resume", "continue a stopped run from its newest good checkpoint",
        "Continue the run in RUN_FOLDER (stopped by SIGTERM, Ctrl-C or a crash) from\n"
        "RUN_FOLDER/resume with its stored config.yaml and trainer.resume=latest, exactly as if\n"
        "it had never stopped; then test its best checkpoint.",
    )
    resume.add_argument("run", metavar="RUN_FOLDER", help="the run folder gyre fit printed")
    resume.add_argument("--quiet", action="store_true", help="no progress bar")

    test = command(
        "test", "test a trained run's best checkpoint again",
        "Rebuild the trainer, model and optimizer from the config stored with the checkpoint\n"
        "(TrainerModule.load_from_checkpoint), the dataset from the run's config, and print the\n"
        "test metrics.",
    )
    test.add_argument("path", metavar="RUN_OR_CHECKPOINT",
                      help="a run folder (its best checkpoint), its checkpoints/ folder, or one checkpoint")

    config = command(
        "config", "print a config, validated, with every default",
        "Validate CONFIG with its overrides (and build its optimizer and callbacks, so a schedule\n"
        "whose phases exceed its total, or a value a callback refuses, fails here too), then print\n"
        "it as YAML with every default filled in.",
    )
    config.add_argument("config", metavar="CONFIG", help="a YAML config")
    config.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    return parser


def _fit_demo(args: argparse.Namespace) -> int:
    import gyre._demo as demo

    given = set(args.demo_options)  # resuming: the others are the run's own

    def option(name: str) -> Any:
        return getattr(args, name) if args.resume is None or "--" + name.replace("_", "-") in given else None

    try:
        result = demo.fit_digits(**{n: option(n) for n in OPTIONS},
                                 out=args.out, quiet=args.quiet, resume=args.resume)
    except demo.DemoArgumentError as err:  # raised before training: a usage error
        args.command_parser.error(f"argument --{err.argument.replace('_', '-')}: {err.summary}")
    return _report(result, result.elapsed.steps, result.elapsed.epochs,
                   lambda: [f"final test accuracy: {result.test_accuracy:.4f}"])


def _report(result: Any, steps: int, epochs: Any, tested: Callable[[], Sequence[str]]) -> int:
    """Prints a run's outcome (``tested()``: its test lines) and returns the exit code."""
    print(f"run folder: {result.run_dir}")
    if result.preempted:
        print(f"preempted after {steps} steps, saved; continue with: gyre resume {result.run_dir}")
        return EXIT_PREEMPTED
    print(f"trained {steps} steps ({epochs} epochs) in {result.seconds:.1f}s")
    for line in tested():
        print(line)
    return EXIT_OK


def _report_run(result: Any) -> int:
    from gyre.trainer._run import metric_lines

    return _report(result, result.steps, result.epochs, lambda: metric_lines(result.test))


def _fit(args: argparse.Namespace) -> int:
    if args.config is not None and "=" in args.config and not os.path.exists(args.config):
        args.overrides, args.config = [args.config, *args.overrides], None
    if args.config is None:
        if args.overrides:
            args.command_parser.error(f"overrides {' '.join(args.overrides)} need a CONFIG before them")
        return _fit_demo(args)
    if args.demo_options:
        option = args.demo_options[0]
        demo = OPTIONS.get(option[2:].replace("-", "_"))
        args.command_parser.error(
            f"argument {option}: belongs to the digits demo (gyre fit without a config); with a config, "
            f"write {demo.config_key if demo else '(use: gyre resume RUN_FOLDER)'}"
        )
    from gyre.trainer._run import run_config

    overrides = list(args.overrides) + (["trainer.enable_progress_bar=false"] if args.quiet else [])
    return _report_run(run_config(args.config, overrides, out=args.out))


def _resume(args: argparse.Namespace) -> int:
    from gyre.trainer._run import resume_run

    return _report_run(resume_run(args.run, quiet=args.quiet))


def _test(args: argparse.Namespace) -> int:
    from gyre.trainer._run import metric_lines, run_test

    for line in metric_lines(run_test(args.path)):
        print(line)
    return EXIT_OK


def _config(args: argparse.Namespace) -> int:
    from gyre.config import dump_config
    from gyre.trainer._run import resolve_config

    print(dump_config(resolve_config(args.config, args.overrides)), end="")
    return EXIT_OK


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "fit": _fit, "resume": _resume, "test": _test, "config": _config,
}


def command_warning(name: str) -> Callable[..., str]:
    """The ``warnings.formatwarning`` of a command: ``gyre fit: warning: ...``, no source lines."""

    def format_warning(message: Warning | str, category: type[Warning], *_: Any) -> str:
        kind = "warning" if issubclass(category, UserWarning) else category.__name__
        return f"{name}: {kind}: {message}\n"

    return format_warning


def _run_command(args: argparse.Namespace) -> int:
    """Runs one command: an explained mistake exits 2, a divergence 3; any other error is raised."""
    from gyre.engine import NonFiniteError
    from gyre.trainer._run import is_user_error, user_message

    name = f"gyre {args.command}"
    formatwarning = warnings.formatwarning
    warnings.formatwarning = command_warning(name)
    try:
        return _COMMANDS[args.command](args)
    except NonFiniteError as err:  # the training diverged: say where, and how to fix it
        print(f"{name}: error: {cli_fix(str(err), diverged_fix(err.step))}{_notes(err)}", file=sys.stderr)
        return EXIT_NON_FINITE
    except Exception as err:
        if not is_user_error(err):
            raise
        print(f"{name}: error: {user_message(err)}{_notes(err)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        warnings.formatwarning = formatwarning


def _notes(err: BaseException) -> str:
    return "".join(f"\n{note}" for note in getattr(err, "__notes__", ()))


def diverged_fix(step: int) -> str:
    """The fix of a diverged training (of a NaN at the first step), in the command line's terms."""
    from gyre.engine._nan import FIRST_STEP

    if step == 0:
        return f"{FIRST_STEP}; trainer.detect_nans=false records such values without stopping"
    return (
        "the training diverged: lower optimizer.learning_rate (gyre fit CONFIG "
        "optimizer.learning_rate=1e-4; the demo: --learning-rate 1e-4), clip the gradients (in "
        "the config, optimizer.transforms: [{class_name: GradClipNorm, max_norm: 1.0}]), and "
        f"check the data of step {step}; trainer.detect_nans=false records such values without stopping"
    )


def cli_fix(message: str, fix: str) -> str:
    """An explained error's message with its fix replaced by the command line's."""
    head, sep, _ = message.rpartition("\n  fix: ")
    return f"{head}{sep}{fix}" if sep else message


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``gyre`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    A usage error (an option or a config that cannot work) prints one explanation to stderr
    and exits with code 2; a diverged training returns 3, a preempted one 75.

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as err:
        ...     main(["config", "no-such.yaml"])
        2
        >>> print(err.getvalue().splitlines()[0])
        gyre config: error: no config file 'no-such.yaml'
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    if extra:  # overrides written after an option: gyre fit run.yaml --quiet trainer.seed=1
        unknown = [e for e in extra if e.startswith("-") or not hasattr(args, "overrides")]
        if unknown or getattr(args, "config", None) is None:
            (getattr(args, "command_parser", None) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command in _COMMANDS:
        return _run_command(args)
    parser.print_help()
    return EXIT_OK
