"""What loading the command line costs: `queuey worker` imports only what consuming needs.

Rich (Rich logs, tables, progress), the management-API client (`queuey queues`),
prometheus-client (`--metrics-port`) and croniter (schedules) each load with the
command or option that uses them, never for a plain worker: they are start-up time and
resident memory (measured in the README's Performance section).
"""

from __future__ import annotations

import subprocess
import sys

OPTIONAL = ("rich", "croniter", "prometheus_client", "queuey_cli.management")


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
