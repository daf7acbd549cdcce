"""What the in-memory backend does differently on purpose (see :mod:`..features`)."""

from __future__ import annotations

from queuey_core.backends.features import Features

#: One process's dict on an injected clock, for tests and demos.
FEATURES = Features(
    across_processes=False,
    follows_given_clock=True,
    leases=False,
    store_built_in=False,
    uncertain_publish=False,
)
