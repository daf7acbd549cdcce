"""The ``queuey.toml`` that tests running real ``queuey worker`` processes write."""

from __future__ import annotations

from pathlib import Path

from tests import harness


def worker_config(path: Path, *, shutdown_timeout: str, queues: dict[str, str]) -> Path:
    """Write a config for 2-thread workers on the test broker to ``path``; ``queues`` maps
    each test queue to its table's body (``prefetch = 2``), beside the example handlers'
    queues (they are installed too, so theirs must be declared)."""
    tables = "".join(f'\n[queues."{name}"]\n{body}\n' for name, body in queues.items())
    path.write_text(
        f"""
[broker]
url = "{harness.AMQP_URL}"
heartbeat = 10

[worker]
concurrency = 2
job_timeout = "60s"
shutdown_timeout = "{shutdown_timeout}"

# The example handlers are installed too: their queues must be declared.
[queues.alpha]
max_priority = 10

[queues.beta]
kind = "quorum"
{tables}"""
    )
    return path
