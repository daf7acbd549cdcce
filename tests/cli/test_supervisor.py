"""The supervisor of ``queuey worker --processes N``, without a broker.

Its pure parts (back-off, exit descriptions, the children's command line), the child's
link (over a real socket pair), bad input, and the supervisor's loop driving stand-in
children: small Python processes that speak the child's protocol and obey SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli import supervisor as supervisor_module
from queuey_cli.main import app
from queuey_cli.output import Exit
from queuey_cli.supervised import SupervisorLink
from queuey_cli.supervisor import Slot
from queuey_cli.supervisor import Supervisor
from queuey_cli.supervisor import describe_exit
from queuey_cli.supervisor import restart_delay
from queuey_core import QueueyError
from queuey_core.settings import MAX_PROCESSES
from queuey_core.settings import Settings
from queuey_core.worker.hooks import JobInfo
from tests.cli.conftest import BASE
from tests.cli.conftest import UNREACHABLE
from tests.support import wait_for

# -- pure parts --------------------------------------------------------------------------


def test_the_restart_delay_doubles_from_half_a_second_up_to_thirty() -> None:
    delays = [restart_delay(n) for n in range(9)]
    assert delays == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert restart_delay(10_000) == 30.0, "no overflow however long a child keeps dying"


def test_an_exit_is_described_by_its_status_or_its_signal() -> None:
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(0) == "exited with status 0"


# -- the child's link --------------------------------------------------------------------


def _job() -> JobInfo:
    return JobInfo(uuid.uuid4(), "greet", "alpha", 1, 0, 0, 0, 0.0)


def _messages(sock: socket.socket) -> list[dict[str, object]]:
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"\n"):
        data += sock.recv(65536)
    return [json.loads(line) for line in data.splitlines()]


def test_a_child_asks_for_its_replacement_once_after_max_jobs() -> None:
    ours, theirs = socket.socketpair()
    link = SupervisorLink(theirs.detach(), index=0, max_jobs=3)
    link.on_job_succeeded(_job())
    link.on_job_failed(_job())
    link.on_job_dead_lettered(_job())  # the third job: every outcome counts
    link.on_job_deferred(_job())
    link.on_job_succeeded(_job())
    assert _messages(ours) == [{"event": "recycle", "jobs": 3}], "asked once, at the third"
    ours.close()


def test_a_child_notices_that_its_supervisors_end_of_the_socket_closed() -> None:
    ours, theirs = socket.socketpair()
    link = SupervisorLink(theirs.detach(), index=1, max_jobs=None)
    gone = threading.Event()
    link.watch(gone.set)
    assert not gone.wait(0.2), "nothing to notice while the supervisor holds its end"
    ours.close()
    assert gone.wait(5), "end of file means the supervisor is gone"
    link.send("ready")  # a send to a gone supervisor is not an error


# -- bad input ---------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path) -> Path:
    path = tmp_path / "queuey.toml"
    path.write_text(BASE.format(url=UNREACHABLE))
    return path


def _one_error(args: list[str], env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, args, env=env)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exit_code == Exit.USAGE, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--processes", "0"], "--processes"),
        (["--processes", "-2"], "--processes"),
        (["--processes", str(MAX_PROCESSES + 1)], "--processes"),
        (["--processes", "many"], "--processes"),
        (["--max-jobs-per-child", "0"], "--max-jobs-per-child"),
        (["--processes", "2", "--burst"], "--burst runs in one process"),
        (["--max-jobs-per-child", "10", "--burst"], "--burst runs in one process"),
    ],
)
def test_bad_process_options_are_one_line_and_exit_2(
    offline: Path, args: list[str], fragment: str
) -> None:
    line = _one_error(["--config", str(offline), "worker", *args])
    assert fragment in line


@pytest.mark.parametrize(
    ("config", "env", "fragment"),
    [
        ("[worker]\nprocesses = 0\n", {}, "worker.processes"),
        ("[worker]\nprocesses = 1000\n", {}, "worker.processes"),
        ("[worker]\nmax_jobs_per_child = -1\n", {}, "worker.max_jobs_per_child"),
        ("", {"QUEUEY_WORKER__PROCESSES": "65"}, "QUEUEY_WORKER__PROCESSES"),
    ],
)
def test_bad_process_settings_are_one_line_and_exit_2(
    offline: Path, config: str, env: dict[str, str], fragment: str
) -> None:
    offline.write_text(offline.read_text() + config)
    line = _one_error(["--config", str(offline), "worker"], env)
    assert fragment in line


def test_the_children_run_the_same_worker_command_with_the_resolved_options(
    offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], int]] = []

    def run(self: Supervisor) -> int:
        seen.append((self.command, self.settings.worker.processes))
        return 0

    monkeypatch.setattr(Supervisor, "run", run)
    args = ["--config", str(offline), "--log-format", "json", "worker", "--processes", "3"]
    args += ["--concurrency", "2", "--queues", "alpha", "--job-timeout", "30s"]
    args += ["--metrics-port", "9999", "--max-jobs-per-child", "100"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    [(command, processes)] = seen
    assert processes == 3
    assert command[:3] == [sys.executable, "-m", "queuey_cli"], "re-executed, not forked"
    assert command[3:8] == ["--config", str(offline), "--log-format", "json", "--log-level"]
    rest = command[command.index("worker") :]
    assert rest == [
        "worker",
        *("--queues", "alpha", "--concurrency", "2", "--job-timeout", "30s"),
        *("--max-jobs-per-child", "100", "--metrics-port", "0"),
    ], "a child serves its metrics on a free port; the supervisor serves 9999"


# -- the loop, with stand-in children ----------------------------------------------------

#: A stand-in child: says ready, asks for a replacement or dies as FAKE_PLAN says for its
#: slot, drains on SIGTERM (exit 0), and stops at once (130) on a second one.
FAKE_CHILD = r"""
import json, os, signal, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[sys.argv.index("--supervised-fd") + 1]))
index = os.environ["QUEUEY_CHILD_INDEX"]
log = open(os.environ["FAKE_LOG"], "a")
terms = []
def term(signum, frame):
    terms.append(signum)
    if len(terms) > 1:
        os._exit(130)
signal.signal(signal.SIGTERM, term)
def say(event, **fields):
    sock.sendall((json.dumps({"event": event, **fields}) + "\n").encode())
log.write(f"start {index} {os.getpid()}\n"); log.flush()
plan = os.environ.get("FAKE_PLAN_" + index, "")
marker = os.environ["FAKE_LOG"] + ".once." + index
first = not os.path.exists(marker)
open(marker, "a").close()
if plan == "crash" and first:
    os._exit(3)
if plan == "refuse":  # as a worker does with a broker it cannot reach
    os._exit(1)
log.write(f"ready {index} {os.getpid()}\n"); log.flush()
say("ready")
if plan == "recycle" and first:
    say("recycle", jobs=5)
if plan == "stop":  # as `queuey workers shutdown` makes a child do
    say("stop")
    log.write(f"drained {index} {os.getpid()}\n"); log.flush()
    sys.exit(0)
while not terms:
    time.sleep(0.01)
say("draining")
if os.environ.get("FAKE_SLOW_DRAIN"):
    time.sleep(60)
log.write(f"drained {index} {os.getpid()}\n"); log.flush()
sys.exit(0)
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Supervisor]:
    log = tmp_path / "children.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    # No test waits through the real back-off.
    monkeypatch.setattr(supervisor_module, "RESTART_INITIAL", 0.01)

    def make(processes: int) -> Supervisor:
        settings = Settings(worker={"processes": processes, "shutdown_timeout": 20})
        return Supervisor([sys.executable, "-c", FAKE_CHILD], settings)

    return make


def _log_lines() -> list[str]:
    path = Path(os.environ["FAKE_LOG"])
    return path.read_text().splitlines() if path.exists() else []


def _signal_when(cond: Callable[[], bool], *signals: signal.Signals) -> threading.Thread:
    """Send ``signals`` to this process (the supervisor's) once ``cond`` holds."""

    def run() -> None:
        try:
            wait_for(cond, timeout=30)
        finally:  # even when it never holds: the test fails, it does not hang
            for s in signals:
                os.kill(os.getpid(), s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _ready(sup: Supervisor, n: int) -> Callable[[], bool]:
    return lambda: sum(c.ready for c in list(sup.children)) >= n


def test_sigterm_drains_every_child_once_and_the_supervisor_exits_0(
    fake: Callable[..., Supervisor],
) -> None:
    sup = fake(3)
    _signal_when(_ready(sup, 3), signal.SIGTERM)
    assert sup.run() == Exit.OK
    drained = [line for line in _log_lines() if line.startswith("drained")]
    assert len(drained) == 3, "each child got one SIGTERM (a second would stop it at once)"
    assert sup.children == []


def test_a_second_signal_stops_every_child_at_once_and_exits_130(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SLOW_DRAIN", "1")
    sup = fake(2)
    _signal_when(_ready(sup, 2), signal.SIGINT)
    _signal_when(lambda: sum(c.draining for c in list(sup.children)) == 2, signal.SIGINT)
    assert sup.run() == Exit.FORCED
    assert not any(line.startswith("drained") for line in _log_lines())


def test_a_child_that_dies_is_restarted_in_its_slot(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PLAN_1", "crash")
    sup = fake(2)

    def restarted() -> bool:
        return len(sup.slots) == 2 and sup.slots[1].restarts == 1 and _ready(sup, 2)()

    _signal_when(restarted, signal.SIGTERM)
    assert sup.run() == Exit.OK
    starts = [line.split()[1] for line in _log_lines() if line.startswith("start")]
    assert sorted(starts) == ["0", "1", "1"], "slot 1 started twice, slot 0 once"
    assert [s.restarts for s in sup.slots] == [0, 1]


def test_a_recycled_child_drains_only_once_its_replacement_is_ready(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PLAN_0", "recycle")
    sup = fake(1)
    _signal_when(lambda: any("drained" in line for line in _log_lines()), signal.SIGTERM)
    assert sup.run() == Exit.OK
    lines = _log_lines()
    first, second = (line.split()[2] for line in lines if line.startswith("start"))
    assert lines.index(f"drained 0 {first}") > lines.index(f"ready 0 {second}")
    assert sup.recycles == 1
    assert [s.restarts for s in sup.slots] == [0], "a replacement is not a restart"


def test_a_child_stopped_by_workers_shutdown_is_not_replaced(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PLAN_0", "stop")
    sup = fake(2)

    def slot_0_gone() -> bool:
        return bool(sup.slots) and sup.slots[0].retired and sup.slots[0].current is None

    _signal_when(lambda: slot_0_gone() and _ready(sup, 1)(), signal.SIGTERM)
    assert sup.run() == Exit.OK
    starts = [line.split()[1] for line in _log_lines() if line.startswith("start")]
    assert sorted(starts) == ["0", "1"], "slot 0 ran once: its stop was not taken for a crash"
    assert [s.restarts for s in sup.slots] == [0, 0]


def test_the_supervisor_exits_0_once_workers_shutdown_stopped_every_child(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PLAN_0", "stop")
    monkeypatch.setenv("FAKE_PLAN_1", "stop")
    sup = fake(2)
    assert sup.run() == Exit.OK, "no signal: the children's own stops end it"
    assert len([line for line in _log_lines() if line.startswith("drained")]) == 2


def test_a_stop_sent_just_before_the_child_ended_is_read_before_its_exit_is_judged(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI once saw the exit first: the stop still waiting in the socket, the slot was
    # restarted as if it had crashed. Here the supervisor looks at the exit first, always.
    monkeypatch.setenv("FAKE_PLAN_0", "stop")
    sup = fake(1)
    sup.slots = [Slot(0)]
    sup._start(sup.slots[0])
    [child] = sup.children
    assert child.proc.wait(30) == 0, "it said ready and stop, then ended; none of it read"
    sup._reap()
    assert sup.slots[0].retired, "the stop was read before the exit was judged"
    assert sup.slots[0].restart_at is None
    assert sup.children == []


def test_children_that_fail_before_any_was_ready_stop_the_supervisor_with_their_code(
    fake: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PLAN_0", "refuse")
    monkeypatch.setenv("FAKE_PLAN_1", "refuse")
    sup = fake(2)
    assert sup.run() == Exit.FAILURE, "an unreachable broker is not restarted forever"
    assert sup.children == []


def test_one_process_without_max_jobs_runs_the_worker_itself_without_a_supervisor(
    offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_supervisor(self: Supervisor) -> int:
        raise AssertionError("a supervisor was started for one process")

    def unreachable(settings: Settings) -> None:
        raise QueueyError("the broker, as this test has it, cannot be reached")

    monkeypatch.setattr(Supervisor, "run", no_supervisor)
    monkeypatch.setattr("queuey_cli.worker.backend", unreachable)
    for args in ([], ["--processes", "1"]):
        result = CliRunner().invoke(app, ["--config", str(offline), "worker", *args])
        assert result.exit_code == Exit.FAILURE, result.stderr
        assert "cannot be reached" in result.stderr, "the worker itself tried to connect"


def test_a_child_whose_parent_is_not_its_supervisor_knows_it_is_orphaned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours, theirs = socket.socketpair()
    monkeypatch.setenv("QUEUEY_SUPERVISOR_PID", str(os.getppid()))
    assert not SupervisorLink(theirs.detach(), index=0, max_jobs=None).orphaned()
    monkeypatch.setenv("QUEUEY_SUPERVISOR_PID", str(os.getpid()))  # not our parent
    assert SupervisorLink(ours.detach(), index=0, max_jobs=None).orphaned()
