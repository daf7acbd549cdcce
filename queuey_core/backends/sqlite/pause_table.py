"""The table of paused queues, ``queuey_paused``: a row per paused queue (schema 4).

Owns its DDL, which :mod:`.schema` adds to a new file and to the step to version 4; a
module of its own because :mod:`.pauses`, which reads and writes the table, imports the
database that imports the schema. Must never: hold anything but a queue's name and when
it was paused.
"""

from __future__ import annotations

#: The table, in schema version 4 (:mod:`.schema`).
SCHEMA: tuple[str, ...] = (
    """CREATE TABLE queuey_paused (
        queue TEXT PRIMARY KEY,
        paused_at INTEGER NOT NULL
    )""",
)
