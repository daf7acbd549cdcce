"""What each import costs a worker process in resident memory.

    .venv/bin/python bench/rss_imports.py [--top 25]

Runs ``queuey --log-format json worker --burst`` with the example handlers (``handlers/``)
on a fresh SQLite file holding one ``greet`` job, in a process that notes its resident
set (``/proc/self/statm``) around every module's first import. Each module's growth
less its own imports' is charged to its top-level package (queuey's modules one by
one); model definitions and other work done while a module is imported count for it.
Prints the interpreter's size before any import, the peak (``ru_maxrss``), and the
packages that cost most. RSS does not depend on the machine's load. Never run as a test.
"""

from __future__ import annotations

import argparse
import atexit
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """This process's resident set now, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def watch_imports(top: int) -> None:
    """Charge every import's RSS growth to its package; print them at exit."""
    import importlib._bootstrap as bootstrap  # noqa: PLC0415 - only in the child

    records: list[tuple[int, str, int]] = []  # (depth, module, growth), in post-order
    depth = [0]
    load = bootstrap._load_unlocked  # type: ignore[attr-defined]

    def measured(spec: Any) -> Any:
        before = rss()
        depth[0] += 1
        try:
            return load(spec)
        finally:
            depth[0] -= 1
            records.append((depth[0], spec.name, rss() - before))

    bootstrap._load_unlocked = measured  # type: ignore[attr-defined]
    start = rss()

    def report() -> None:
        own: dict[str, int] = {}
        pending: list[tuple[int, int]] = []
        for level, name, growth in records:
            inner = 0
            while pending and pending[-1][0] > level:
                inner += pending.pop()[1]
            key = name if name.startswith("queuey") else name.split(".")[0]
            own[key] = own.get(key, 0) + growth - inner
            pending.append((level, growth))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        mb = 2**20
        out = sys.__stderr__
        assert out is not None
        print(
            f"before the first import watched (the interpreter, this script): {start / mb:.1f} MB",
            file=out,
        )
        print(f"imports: {sum(own.values()) / mb:.1f} MB; peak RSS: {peak / mb:.1f} MB", file=out)
        print("| package | MB |\n|---|---|", file=out)
        for key, size in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
            print(f"| {key} | {size / mb:.2f} |", file=out)

    atexit.register(report)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        watch_imports(int(sys.argv[2]))
        sys.argv = ["queuey", "--log-format", "json", "worker", "--burst"]
        from queuey_cli.main import main as queuey  # noqa: PLC0415

        queuey()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="queuey-rss-"))
    config = where / "queuey.toml"
    config.write_text(
        f'[broker]\nurl = "sqlite:///{where / "queuey.db"}"\n'
        "[queues.alpha]\nprefetch = 8\nmax_priority = 10\n[queues.beta]\nprefetch = 1\n"
    )
    env = {**os.environ, "QUEUEY_CONFIG": str(config)}
    queuey = str(BIN / "queuey")
    subprocess.run([queuey, "enqueue", "greet", '{"name": "ada"}'], env=env, check=True)
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(args.top)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    print("\n".join(line for line in done.stderr.splitlines() if not line.startswith("{")))


if __name__ == "__main__":
    main()
