"""The suite's watchdog (tests/conftest.py): a test that hangs ends the run within its
limit, with the stack of the task that hung, instead of using up CI's time in silence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HANGING = """
import asyncio
from pathlib import Path


async def test_waits_for_nothing(tmp_path: Path) -> None:
    (tmp_path / "worker-1.log").write_text("the worker's last words")
    await asyncio.Event().wait()
"""


def test_a_hung_test_ends_the_run_with_its_stack(tmp_path: Path) -> None:
    test_file = tmp_path / "test_hangs.py"
    test_file.write_text(HANGING)
    env = {**os.environ, "STRATA_TEST_TIME_LIMIT": "2"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            "-o",
            "asyncio_mode=auto",
            "-o",
            "asyncio_default_fixture_loop_scope=session",
            str(test_file),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "test_waits_for_nothing exceeded 2 s" in out
    assert "await asyncio.Event().wait()" in out  # the pending task's own line
    assert "the worker's last words" in out  # the test's process logs
