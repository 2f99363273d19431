"""A SIGTERM before the server's handler: exit 0 wherever the signal lands, even inside code that rewraps
exceptions (a class body's `__set_name__` turned SystemExit into RuntimeError: exit 1 in CI)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The signal arrives while a descriptor's __set_name__ runs, as it did inside rich's dataclasses.
LANDS_IN_SET_NAME = textwrap.dedent(
    """
    import sys, time
    from service.early_stop import take_sigterm_as_stop

    take_sigterm_as_stop()

    class Slow:
        def __set_name__(self, owner, name):
            print("ready", flush=True)
            time.sleep(30)

    class Owner:
        field = Slow()

    sys.exit(3)  # never reached: the stop comes first
    """
)


def test_sigterm_inside_set_name_is_a_clean_exit() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", LANDS_IN_SET_NAME],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
