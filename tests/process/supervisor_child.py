"""A supervisor process for the signal-burst tests: the library's supervisor over two
stand-in children (:mod:`tests.process.fake_child`), no broker.

Run as ``python -m tests.process.supervisor_child SHUTDOWN_TIMEOUT`` with ``FAKE_LOG``
set; it prints ``ready`` and the children's pids once both children are ready, then
exits as the supervisor decides, as the console script does.
"""

from __future__ import annotations

import sys
import threading
import time

from queuey_core.process.running import exit_process
from queuey_core.process.stops import StopRequests
from queuey_core.process.supervisor import Supervisor
from queuey_core.settings import Settings
from tests.process.fake_child import FAKE_CHILD


def main() -> None:
    """Supervise until stopped; exit with the supervisor's code."""
    stops = StopRequests().install()
    settings = Settings(worker={"processes": 2, "shutdown_timeout": float(sys.argv[1])})
    sup = Supervisor([sys.executable, "-c", FAKE_CHILD], settings, stops=stops)

    def announce() -> None:
        while sum(c.ready for c in list(sup.children)) < 2:
            time.sleep(0.005)
        pids = " ".join(str(c.pid) for c in list(sup.children))
        print(f"ready {pids}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        code = sup.run()
    finally:
        stops.retire()
    exit_process(code)


if __name__ == "__main__":
    main()
