"""Finding the dead letters a ``queuey dlq`` command names: by the handle as typed (a
job id, or a handle such as ``#3`` for a message that is no envelope), else by the job
id the key given to ``enqueue --job-id`` stands for, as ``enqueue`` made it
(:func:`~queuey_core.job_ids.id_text_of_key`). Owns: :func:`find`, :func:`present`,
:func:`requeue_some`, :func:`delete_some`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queuey_cli.dlq_format import Found

#: The queue of delayed messages that no queue took (topology.UNROUTABLE; spelled here
#: so that importing the CLI does not import pika).
UNROUTABLE = "queuey.unroutable"


def find(broker: Any, names: list[str], text: str) -> Found | None:
    """The first dead letter ``text`` names in ``names``' queues, with its queue."""
    found: list[Found] = []

    def look(texts: set[str]) -> set[str]:
        for name in names:
            for handle in texts:
                dead = broker.get_dead_letter(name, handle)
                if dead is not None:
                    found.append((name, dead))
                    return set()
        return texts

    _by_text_then_key({text}, look)
    return found[0] if found else None


def present(broker: Any, name: str, handles: set[str]) -> dict[str, Any]:
    """Those of ``handles`` among the dead letters of ``name``, each with the first
    dead letter listed under it: a lookup each (an index on SQLite, a pass that stops
    at it on RabbitMQ)."""
    found = {h: broker.get_dead_letter(name, h) for h in sorted(handles)}
    return {h: d for h, d in found.items() if d is not None}


def requeue_some(
    broker: Any, names: list[str], wanted: set[str]
) -> tuple[int, set[str], set[str], dict[str, str]]:
    """Requeue ``wanted`` wherever they are: how many moved, those not found, those
    that are not envelopes, and those still in the unroutable queue (with the queue
    each names, which does not exist)."""
    from queuey_core.backends.capabilities import DeadLetter, UndecodableDeadLetter  # noqa: PLC0415

    moved = 0
    stuck: set[str] = set()
    homeless: dict[str, str] = {}

    def move(texts: set[str]) -> set[str]:
        nonlocal moved, homeless
        if len(names) == 1 and len(texts) == 1 and names[0] != UNROUTABLE:
            # The usual case, in one pass: the lookup only when it did not move (to say
            # why).
            done = broker.requeue_dead_letters(names[0], sorted(texts))
            if done:
                moved += done
                return set()
        for name in names:
            here = present(broker, name, texts)
            stuck.update(h for h, d in here.items() if isinstance(d, UndecodableDeadLetter))
            mine = sorted(h for h, d in here.items() if isinstance(d, DeadLetter))
            if mine:
                moved += broker.requeue_dead_letters(name, mine)
                if name == UNROUTABLE:
                    homeless = {
                        h: d.envelope.queue
                        for h, d in present(broker, name, set(mine)).items()
                        if isinstance(d, DeadLetter)
                    }
            texts = texts - set(here)
        return texts

    missed = _by_text_then_key(wanted, move)
    return moved, missed, stuck, homeless


def delete_some(broker: Any, names: list[str], wanted: set[str]) -> tuple[int, set[str]]:
    """Delete ``wanted`` (envelopes or not) wherever they are: how many went, and
    those not found."""
    deleted = 0

    def delete(texts: set[str]) -> set[str]:
        nonlocal deleted
        if len(names) == 1 and len(texts) == 1:  # the usual case, in one pass
            done = broker.delete_dead_letters(names[0], sorted(texts))
            deleted += done
            return set() if done else texts
        for name in names:
            # Position handles ("#N") are found before anything goes.
            mine = set(present(broker, name, texts))
            if mine:
                deleted += broker.delete_dead_letters(name, sorted(mine))
                texts = texts - mine
        return texts

    missed = _by_text_then_key(wanted, delete)
    return deleted, missed


def _by_text_then_key(texts: set[str], attempt: Callable[[set[str]], set[str]]) -> set[str]:
    """``attempt`` on ``texts`` as typed (it returns those it did not find), then on the
    job ids the keys among those left stand for; the texts found in neither way."""
    from queuey_core.job_ids import id_text_of_key  # noqa: PLC0415

    missed = attempt(texts)
    keys = {derived: text for text in missed if (derived := id_text_of_key(text)) is not None}
    if not keys:
        return missed
    again = attempt(set(keys))
    return (missed - set(keys.values())) | {keys[k] for k in again}
