"""A run's log file and stderr threshold (trainer.logger.log_file_verbosity, stderrthreshold)."""

import logging
import warnings

import pytest

from gyre.trainer._run import LOG_FILE, run_logging


def messages(folder):
    return [line.split(" ", 2)[2] for line in (folder / LOG_FILE).read_text().splitlines() if line[:1].isdigit()]


def test_the_file_keeps_records_from_its_level_and_the_warnings_once(tmp_path, capsys):
    other = logging.getLogger("someone.else")
    with pytest.warns(UserWarning, match="the schedule does not fit"):  # still raised as a warning
        with run_logging(tmp_path, file_level="info", stderr_level="error") as log:
            log.debug("hidden")
            log.info("kept")
            other.warning("a library's warning")
            warnings.warn("the schedule does not fit", UserWarning, stacklevel=1)
    assert messages(tmp_path) == ["INFO gyre.run: kept", "WARNING someone.else: a library's warning",
                                  "WARNING gyre.run: UserWarning: the schedule does not fit"]
    err = capsys.readouterr().err
    assert "WARNING gyre.run" not in err  # a warning is Python's to show (pytest records it here), not the console's
    if not logging.getLogger().handlers:  # no console of the user's: ours shows error and up only
        assert "a library's warning" not in err


def test_everything_is_restored_and_an_unused_log_makes_no_file(tmp_path):
    root, show = logging.getLogger(), warnings.showwarning
    level, handlers = root.level, list(root.handlers)
    with run_logging(tmp_path / "run", file_level="warning"):
        logging.getLogger("gyre.run").info("below the file's level")
    assert (root.level, root.handlers, warnings.showwarning) == (level, handlers, show)
    assert not (tmp_path / "run" / LOG_FILE).exists()


@pytest.mark.parametrize("keys, match", [({"file_level": "verbose"}, r"log_file_verbosity must be one of debug"),
                                         ({"stderr_level": 3}, r"stderrthreshold must be one of debug")])
def test_a_level_that_is_none(tmp_path, keys, match):
    with pytest.raises(ValueError, match=match):
        with run_logging(tmp_path, **keys):
            pass
