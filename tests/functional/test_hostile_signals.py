"""Issue 27 item 10: a stop signal that arrives right at the end (the command's work done, the
process on its way out) still exits with 130, never by the signal (-2) or with a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.paths import EXAMPLE_SUITE

LATE_SIGNAL = """
import os, runpy, signal, sys
import kldtui.cli.main
cli = sys.modules["kldtui.cli.main"]
real = cli.main
late = getattr(signal, sys.argv.pop(1))

def main(argv=None):
    code = real(argv)
    os.kill(os.getpid(), late)  # the work is done: now the signal comes
    return code

cli.main = main
runpy.run_module("kldtui", run_name="__main__")
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_right_at_the_end_exits_130(sig: str) -> None:
    proc = subprocess.run([sys.executable, "-c", LATE_SIGNAL, sig, "verify", str(EXAMPLE_SUITE)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    assert proc.returncode != -signal.SIGINT
