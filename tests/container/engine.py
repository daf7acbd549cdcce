"""Driving podman from the container tests: run, exec, health, stop, and cleaning up by
name (never a prune: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The tests' image: built from the worktree by the session (see conftest.py).
IMAGE_TAG = "localhost/queuey:test"
#: Seconds a podman command may take on a busy two-core machine.
TIMEOUT = 180.0


class EngineError(RuntimeError):
    """podman failed: its stderr's last line says why."""


def podman(
    *args: str, timeout: float = TIMEOUT, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; raise :class:`EngineError` on failure when ``check``."""
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        # Each run without systemd says it cannot add the health timer: not the reason.
        lines = [ln for ln in done.stderr.splitlines() if "systemd" not in ln]
        why = lines[-1] if lines else f"exit {done.returncode}"
        raise EngineError(f"podman {' '.join(args[:2])}: {why}")
    return done


def unique(prefix: str) -> str:
    """A container or volume name no other test (or engineer) uses."""
    return f"queuey-test-{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(cond: Callable[[], bool], *, timeout: float = 90.0, step: float = 0.25) -> float:
    """Poll ``cond`` until it holds; return the seconds it took. Fails after ``timeout``."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout:g}s")
        time.sleep(step)
    return time.monotonic() - start


@dataclass
class Containers:
    """What a test starts; :meth:`remove_all` removes each by name."""

    image: str
    env: dict[str, str]
    names: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def volume(self) -> str:
        """A new named volume (podman makes it owned by the image's user on first mount)."""
        name = unique("data")
        podman("volume", "create", name)
        self.volumes.append(name)
        return name

    def _args(self, env: dict[str, str], volume: str | None, extra: Sequence[str]) -> list[str]:
        args = ["--network", "host"]
        for key, value in {**self.env, **env}.items():
            args += ["-e", f"{key}={value}"]
        if volume is not None:
            args += ["-v", f"{volume}:/data"]
        return [*args, *extra]

    def start(
        self,
        *command: str,
        env: dict[str, str] | None = None,
        volume: str | None = None,
        extra: Sequence[str] = (),
    ) -> str:
        """Start ``IMAGE COMMAND`` in the background; returns the container's name."""
        name = unique(command[0] if command else "default")
        self.names.append(name)
        podman(
            "run", "-d", "--name", name, *self._args(env or {}, volume, extra), self.image, *command
        )
        return name

    def once(
        self,
        *command: str,
        env: dict[str, str] | None = None,
        volume: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``IMAGE COMMAND`` through the entrypoint to its end, as a user would."""
        return podman(
            "run", "--rm", *self._args(env or {}, volume, ()), self.image, *command, check=check
        )

    def remove_all(self) -> None:
        for name in self.names:
            podman("rm", "-f", "-v", "-t", "0", name, check=False)  # -v: its anonymous /data
        for name in self.volumes:
            podman("volume", "rm", "-f", name, check=False)


def healthy(name: str) -> bool:
    """Run the container's HEALTHCHECK now (no systemd runs it here); True when it passes."""
    return podman("healthcheck", "run", name, check=False, timeout=60).returncode == 0


def until_healthy(name: str, *, timeout: float = 120.0) -> float:
    """Run the health check until it passes; return the seconds it took. Fails at once,
    with the container's output, when the container has exited."""

    def passed() -> bool:
        if healthy(name):
            return True
        assert state(name)["Running"], f"{name} exited: {logs(name)}"
        return False

    return eventually(passed, timeout=timeout)


def health_status(name: str) -> str:
    """What podman recorded of the health checks: starting, healthy or unhealthy."""
    return str(inspect(name)["State"]["Health"]["Status"])


def inspect(name: str) -> dict[str, Any]:
    """``podman inspect NAME``, parsed."""
    found: list[dict[str, Any]] = json.loads(podman("inspect", name).stdout)
    return found[0]


def state(name: str) -> dict[str, Any]:
    """The container's state (Running, ExitCode, Pid, ...)."""
    value = inspect(name)["State"]
    assert isinstance(value, dict)
    return value


def logs(name: str) -> str:
    """The container's output so far (for assertion messages)."""
    done = podman("logs", name, check=False)
    return (done.stdout + done.stderr)[-3000:]


def job(name: str, job_id: str) -> dict[str, Any]:
    """``queuey job ID --json`` in a running container ({} while the store has no record)."""
    done = podman("exec", name, "queuey", "job", job_id, "--json", check=False)
    if done.returncode != 0:
        return {}
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def enqueue(name: str, job_type: str, payload: str) -> str:
    """Enqueue in a running container; returns the job's id."""
    return (
        podman("exec", name, "queuey", "enqueue", job_type, payload).stdout.strip().splitlines()[-1]
    )
