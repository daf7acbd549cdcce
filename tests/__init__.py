"""queuey's tests, laid out like the packages they test.

- ``tests/<subpackage>/`` holds the tests of ``queuey_core/<subpackage>/``
  (``backends/``, ``backends/rabbitmq/``, ``backends/sqlite/``, ``control/``,
  ``observability/``, ``schedules/``, ``worker/``); ``tests/producer/`` those of
  ``queuey_core/producer.py``; ``tests/cli/`` those of ``queuey_cli``; ``tests/docs/``
  the documentation site's checks. A top-level module with one test file has it at
  the root (``test_clock.py``, ``test_urls.py`` ...), and ``test_module_shape.py`` holds
  the rules for the code's shape (import cycles, module size, docstrings).
- ``tests/integration/`` holds the tests that need a real RabbitMQ, in the same mirror
  (``integration/backends/rabbitmq/``, ``integration/cli/`` ...); its helpers
  (``broker.py``, ``nodes.py``, ``processes.py`` ...) stay at its root. Each file marks
  what needs the broker ``integration`` (a module ``pytestmark``, or a fixture parameter
  like the contract tests' ``rabbitmq`` half); what needs none (the TLS settings checks,
  the contract's memory half) runs with the unit tests. A test that runs twice, in memory
  and on RabbitMQ, stays in the unit mirror: the ``h`` fixture marks its RabbitMQ half.
- Shared setup: fixtures in ``conftest.py`` (the root's for every test, ``cli/``'s and
  ``integration/``'s for theirs), helpers in ``support.py`` (the seed's jobs, queues,
  Recorder, a worker on a thread), ``harness.py`` (the memory-or-RabbitMQ environments)
  and ``pika_fakes.py`` (pika stand-ins for tests that play the broker).

``pytest -m "not integration"`` runs what needs no broker.
"""
