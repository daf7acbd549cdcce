"""What the RabbitMQ backend does differently on purpose (see :mod:`..features`)."""

from __future__ import annotations

from queuey_core.backends.features import Features

#: A server: delays are its TTLs in real time, a dead connection gives its jobs back.
FEATURES = Features(
    across_processes=True,
    follows_given_clock=False,
    leases=False,
    store_built_in=False,
    uncertain_publish=True,
)
