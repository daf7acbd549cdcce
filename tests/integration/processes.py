"""``queuey`` as a subprocess of an integration test: its command line, its JSON logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def module_command(config: Path, *args: str) -> list[str]:
    """``python -m queuey_cli --config CONFIG --log-format json ARGS``: this interpreter's
    queuey, whichever console script is on the PATH."""
    return [
        sys.executable,
        "-m",
        "queuey_cli",
        "--config",
        str(config),
        "--log-format",
        "json",
        *args,
    ]


def unbuffered() -> dict[str, str]:
    """This process's environment, with Python's output unbuffered (logs come as written)."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


class JsonLogProcess:
    """A subprocess whose JSON log lines (on stderr) are read as they come, each with the
    monotonic time it was read at."""

    def __init__(
        self, command: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            command,
            stderr=subprocess.PIPE,
            text=True,
            env=unbuffered() if env is None else env,
            cwd=cwd,
        )
        self._timed: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("{"):
                with self._lock:
                    self._timed.append((time.monotonic(), json.loads(line)))

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every log record read so far."""
        with self._lock:
            return [event for _, event in self._timed]

    def timed(self) -> list[tuple[float, dict[str, Any]]]:
        """Every log record read so far, with when it was read."""
        with self._lock:
            return list(self._timed)

    def join_reader(self) -> None:
        """Wait (a little) for the last lines of a process that has ended."""
        self._reader.join(5)
