"""Signal handling of ``gyre.engine._engine`` (the loop-level behaviour is in test_resume.py)."""

import signal

import pytest

from gyre.engine import _engine
from gyre.engine._engine import Preemption


def test_the_outermost_loop_installs_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with Preemption(catch_interrupt=True, outermost=True) as p:
        assert signal.getsignal(signal.SIGTERM) is _engine._handler
        assert signal.getsignal(signal.SIGINT) is _engine._handler
        assert p.check(0) is False
        _engine._handler(signal.SIGTERM, None)
        assert p.check(0) is True and Preemption.signal_name() == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert not _engine.requested()


def test_ctrl_c_is_left_alone_unless_caught():
    before = signal.getsignal(signal.SIGINT)
    with Preemption(catch_interrupt=False, outermost=True):
        assert signal.getsignal(signal.SIGINT) is before


def test_a_second_signal_stops_at_once():
    with Preemption(catch_interrupt=True, outermost=True):
        _engine._handler(signal.SIGINT, None)
        with pytest.raises(KeyboardInterrupt):
            _engine._handler(signal.SIGINT, None)
        with pytest.raises(SystemExit) as info:
            _engine._handler(signal.SIGTERM, None)
        assert info.value.code == 128 + signal.SIGTERM


def test_nested_loops_never_stop_midway():
    with Preemption(catch_interrupt=True, outermost=False) as p:
        _engine._RECEIVED.append(signal.SIGTERM)
        try:
            assert p.check(3) is False
        finally:
            _engine._RECEIVED.clear()
