"""The contract suite: what the docs promise, on every backend, as users meet it.

Each test takes a backend fixture of ``conftest.py``, parametrised over
``tests/backend_kinds.py`` (memory and the embedded file on a ManualClock, RabbitMQ in
real time; RabbitMQ with a SQLite and with a PostgreSQL job store where a test needs a
store), and skips by what a backend *declares* (``@pytest.mark.requires("feature")``:
a flag of :class:`queuey_core.backends.features.Features` or a capability), never by
its name. Where backends differ on purpose, the feature's docstring says why and
docs/backends.md shows the table.

Where each promise is tested:

- the three producer outcomes: ``test_enqueue_outcomes.py`` (confirmed, not enqueued on
  a closed backend); the unknown outcome needs a fault no test can cause the same way on
  every backend, so it stays beside each backend that declares ``uncertain_publish``:
  ``tests/backends/sqlite/test_sqlite_backend.py`` (a signal during the COMMIT) and
  ``tests/integration/backends/rabbitmq/test_producer_faults.py`` (a memory alarm);
- priorities and delays through a Producer and a Worker: ``test_ordering.py``;
- deferrals (no attempt spent, top priority), retries with backoff, dead letters with
  their reason: the seed's worker tests, which run on every backend through the same
  ``h`` fixture (``tests/worker/test_worker.py``, ``tests/worker/test_poison.py``);
- every ``dlq`` command: ``tests/integration/backends/test_dead_letter_pages.py``
  (every backend, and RabbitMQ with each store);
- cancellation (before a worker starts, while a job runs), results and history:
  ``test_cancel_and_history.py``, on each backend with its store;
- the command line on the real backend (``queuey job``, ``--burst`` and what it does
  with delayed and leased jobs, a worker's jobs after ``kill -9``, the forced second
  signal): ``test_processes.py``, on every backend that ``across_processes``.
"""
