"""Signal handling of ``gyre.engine._preempt`` (the loop-level behaviour is in test_resume.py)."""

import signal

import pytest

from gyre.engine import _preempt
from gyre.engine._preempt import Preemption


def test_the_outermost_loop_installs_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with Preemption(catch_interrupt=True, outermost=True) as p:
        assert signal.getsignal(signal.SIGTERM) is _preempt._handler
        assert signal.getsignal(signal.SIGINT) is _preempt._handler
        assert p.check(0) is False
        _preempt._handler(signal.SIGTERM, None)
        assert p.check(0) is True and Preemption.signal_name() == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert not _preempt.requested()


def test_ctrl_c_is_left_alone_unless_caught():
    before = signal.getsignal(signal.SIGINT)
    with Preemption(catch_interrupt=False, outermost=True):
        assert signal.getsignal(signal.SIGINT) is before


def test_a_second_signal_stops_at_once():
    with Preemption(catch_interrupt=True, outermost=True):
        _preempt._handler(signal.SIGINT, None)
        with pytest.raises(KeyboardInterrupt):
            _preempt._handler(signal.SIGINT, None)
        with pytest.raises(SystemExit) as info:
            _preempt._handler(signal.SIGTERM, None)
        assert info.value.code == 128 + signal.SIGTERM


def test_nested_loops_never_stop_midway():
    with Preemption(catch_interrupt=True, outermost=False) as p:
        _preempt._RECEIVED.append(signal.SIGTERM)
        try:
            assert p.check(3) is False
        finally:
            _preempt._RECEIVED.clear()
