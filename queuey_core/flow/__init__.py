"""Flow control: what decides whether a job may be enqueued or may start now.

Unique jobs (:mod:`.unique`: a second enqueue of a held key is a duplicate), rate and
concurrency limits per job type or queue, partitioned by a key from the job's arguments
(:mod:`.limits`), and paused queues (:mod:`.pause`). docs/flow-control.md is the user's
page; each module's docstring says what it owns.
"""
