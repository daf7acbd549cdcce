"""What the embedded backend does differently on purpose (see :mod:`..features`)."""

from __future__ import annotations

from queuey_core.backends.features import Features

#: A file every process on the machine opens; time is the clock it is given.
FEATURES = Features(
    across_processes=True,
    follows_given_clock=True,
    leases=True,
    store_built_in=True,
    uncertain_publish=True,
)
