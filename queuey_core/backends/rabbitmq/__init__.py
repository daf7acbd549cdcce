"""RabbitMQ through pika: the only package that imports pika.

Three connections, each with one owner (pika is not thread-safe):

* the **consumer link** and the **publisher link** each run a ``SelectConnection`` on
  a thread of their own (:mod:`.link`), so heartbeats flow while jobs run for minutes.
  Other threads hand them work with ``add_callback_threadsafe`` and wait on a result.
  Both recover a lost connection with tenacity's backoff: consumers re-subscribe
  (:mod:`.consumer`), the publisher republishes what the broker had not confirmed
  (:mod:`.publisher`). Consuming and publishing are apart so that flow control on
  publishes never stalls a consumer's acks. A lone ``enqueue()`` may publish on the
  caller's own thread instead (:mod:`.direct`).
* the **admin** connection (:mod:`.admin`, a ``BlockingConnection`` behind a lock)
  declares the topology (:mod:`.topology`) and lists, requeues and purges dead letters.

Given several URLs (a cluster's nodes), every connection picks its node the same way
(:mod:`.nodes`): from a list shuffled per process, starting where the process's last
connection succeeded, on to the next node at once when one fails or is lost.

Every publish is persistent, ``mandatory`` and confirmed: an unroutable or refused
publish raises, nothing is dropped silently. A retry, deferral or dead letter is
confirmed on its new queue before the original is acked (:mod:`.delivery`; a crash in
between duplicates, never loses). A settle for a delivery whose channel has died is
refused, never sent on a new channel: the broker redelivers that message. pika's
exceptions become queuey's at this package's edge (:mod:`.errors`).

:class:`RabbitMQBackend` (:mod:`.backend`) joins these behind the Backend protocol.
"""

from __future__ import annotations

from queuey_core.backends.rabbitmq.backend import DEFAULT_URL, RabbitMQBackend

__all__ = ["DEFAULT_URL", "RabbitMQBackend"]
