"""Pure building blocks of gyre: the clock, schedules, logs and history. No I/O."""
