"""The lock around compiling the CPU loops with numba (its cache has none of its own)."""

from __future__ import annotations

import subprocess
import sys
import time

from compactinst_ros import jit


def test_a_second_process_takes_the_lock_only_after_the_first_releases_it() -> None:
    """Processes starting together would each compile the loops; under the lock the others
    wait and then load numba's cache."""
    waiter = (
        "import time; from compactinst_ros import jit\n"
        "with jit.compile_lock(): print(time.time())\n"
    )
    with jit.compile_lock():
        proc = subprocess.Popen([sys.executable, "-c", waiter], stdout=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert proc.poll() is None  # still waiting for the lock
        released = time.time()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert float(out) >= released
