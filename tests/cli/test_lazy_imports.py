"""What loading the command line costs: `queuey worker` imports only what consuming needs.

Rich (Rich logs, tables, progress), the management-API client (`queuey queues`),
prometheus-client (`--metrics-port`), croniter (schedules) and sqlite3 (the embedded
backend, a job store) each load with the command or option that uses them, never for a
plain worker on RabbitMQ: they are start-up time and
resident memory (measured in the README's Performance section).
"""

from __future__ import annotations

import re
import subprocess
import sys

from typer.testing import CliRunner

from queuey_cli.main import app

OPTIONAL = ("rich", "croniter", "prometheus_client", "queuey_core.management_api", "sqlite3")


def loaded_after(code: str) -> list[str]:
    """The optional modules loaded after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {OPTIONAL!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_the_command_line_with_json_logs_loads_no_optional_module() -> None:
    code = (
        "import queuey_cli.main\n"
        "from queuey_cli.output import LogFormat, setup_logging\n"
        "setup_logging(LogFormat.JSON, 'info')"
    )
    assert loaded_after(code) == []


def test_a_worker_on_rabbitmq_loads_no_sqlite() -> None:
    # The dead letters' job-store tables load it when a store is configured, not before.
    code = "import queuey_core.process.worker, queuey_core.backends.rabbitmq"
    assert loaded_after(code) == []
    assert loaded_after(f"{code}\nimport queuey_core.backends.sqlite.backend") == ["sqlite3"]


def test_the_library_loads_schedules_only_when_asked() -> None:
    assert loaded_after("import queuey_core") == []
    assert loaded_after("import queuey_core; queuey_core.Cron('* * * * *').next_after(0)") == [
        "croniter"
    ]


def test_rich_logs_and_errors_still_load_rich() -> None:
    code = (
        "from queuey_cli.output import LogFormat, error, setup_logging\n"
        "setup_logging(LogFormat.RICH, 'info')"
    )
    assert loaded_after(code) == ["rich"]
    assert loaded_after("from queuey_cli.output import error\nerror('x')") == ["rich"]


#: Every command of the root, in the order its help lists them.
COMMANDS = [
    "worker",
    "enqueue",
    "job",
    "jobs",
    "cancel",
    "queues",
    "limits",
    "unique",
    "handlers",
    "scheduler",
    "schema",
    "dlq",
    "config",
    "schedules",
    "workers",
    "migrate",
    "dashboard",
    "health",
    "init",
    "workflow",
]


def test_the_command_line_loads_no_command_module_but_the_worker() -> None:
    others = [f"queuey_cli.{name}" for name in COMMANDS if name not in ("worker", "schedules")]
    probe = (
        "import sys, queuey_cli.main\n"
        f"print(' '.join(m for m in {[*others, 'queuey_cli.enqueue_file']!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [], "a command module is loaded only when its command runs"


def test_the_help_still_lists_every_command_in_order(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    listed = re.findall(r"^\W+([a-z]+)\s{2,}\S", result.output.split("Commands")[1], re.M)
    assert listed == COMMANDS, "the lazy commands are listed as the eager ones were"


def test_a_lazy_command_runs_and_a_mistyped_one_is_suggested(runner: CliRunner) -> None:
    shown = runner.invoke(app, ["schema", "envelope"])
    assert shown.exit_code == 0, shown.output
    assert '"job_type"' in shown.output, "the envelope's schema, from a lazily built command"
    typo = runner.invoke(app, ["enqeue"])
    assert typo.exit_code == 2
    assert "Did you mean 'enqueue'" in typo.output, "suggestions know the lazy names"


def test_the_library_loads_the_memory_backend_producer_and_scheduler_on_first_use() -> None:
    lazy = (
        "queuey_core.backends.memory",
        "queuey_core.producer",
        "queuey_core.schedules.scheduler",
    )
    probe = (
        "import sys, queuey_core, queuey_core.settings, queuey_core.backends\n"
        f"print(' '.join(m for m in {lazy!r} if m in sys.modules))\n"
        "from queuey_core import MemoryBackend, Producer, job_id_for\n"
        "from queuey_core.backends import MemoryBackend as Same\n"
        "from queuey_core.schedules import Scheduler, build_schedules\n"
        "assert Same is MemoryBackend and callable(job_id_for)\n"
        f"print(' '.join(m for m in {lazy!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, after = done.stdout.split("\n")[:2]
    assert before == "", "a RabbitMQ worker without schedules loads none of them"
    assert after.split() == list(lazy), "each loads on first use"


#: Each group's subcommands, whose help is asked for too.
SUBCOMMANDS = [
    ["dlq", "list"],
    ["config", "show"],
    ["schedules", "fire"],
    ["workers", "shutdown"],
    ["unique", "release"],
]


def test_no_help_loads_pydantic_or_rich() -> None:
    # Typer checked every option (defaults too) with a pydantic adapter, and drew its
    # help with Rich: half of a `--help`'s time, now paid only by commands that run.
    heavy = ("pydantic", "pydantic_settings", "rich", "pika", "queuey_core.settings")
    asked = [[], *([name] for name in COMMANDS), *SUBCOMMANDS]
    probe = (
        "import sys\n"
        "from queuey_cli.main import app\n"
        f"for args in {asked!r}:\n"
        "    try:\n"
        "        app([*args, '--help'], prog_name='queuey')\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, (args, exc.code)\n"
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "Usage:" in done.stdout
    assert done.stderr.split() == [], "no help imports them"
