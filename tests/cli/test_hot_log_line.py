"""A HotLine's record is the record ``logger.info(msg, extra=fields)`` makes, and it
goes where that one goes (levels, filters, handlers)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from queuey_core.logs import JsonFormatter
from queuey_core.logs.hot import HotLine

FIELDS = {"job_id": "abc", "job_type": "t.x", "queue": "q", "attempt": 2}
PER_RECORD = {"created", "msecs", "relativeCreated", "thread", "threadName", "process"}


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[tuple[logging.Logger, Keep]]:
    logger = logging.getLogger("queuey_test.hot")
    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    saved = (logging._srcfile, logging.logThreads, logging.logProcesses)
    saved_mp = logging.logMultiprocessing
    # The command line's settings (queuey_cli.output.setup_logging), where HotLine
    # makes its own records.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    try:
        yield logger, handler
    finally:
        logging._srcfile, logging.logThreads, logging.logProcesses = saved
        logging.logMultiprocessing = saved_mp
        logger.removeHandler(handler)
        logger.propagate = True


def test_record_matches_logger_info(kept: tuple[logging.Logger, Keep]) -> None:
    logger, handler = kept
    logger.info("job succeeded", extra=FIELDS)
    HotLine(logger, logging.INFO, "job succeeded")(FIELDS)
    ordinary, hot = handler.records
    assert type(hot) is type(ordinary)
    same = {k: v for k, v in vars(ordinary).items() if k not in PER_RECORD}
    assert {k: v for k, v in vars(hot).items() if k not in PER_RECORD} == same
    assert set(vars(hot)) == set(vars(ordinary))
    assert 0 <= hot.created - ordinary.created < 5
    assert 0 <= hot.msecs < 1000


def test_json_line_is_the_same_but_for_the_time(kept: tuple[logging.Logger, Keep]) -> None:
    logger, handler = kept
    logger.info("job succeeded", extra=FIELDS)
    HotLine(logger, logging.INFO, "job succeeded")(FIELDS)
    formatter = JsonFormatter()
    ordinary, hot = (formatter.format(r) for r in handler.records)
    assert ordinary.split('"level"', 1)[1] == hot.split('"level"', 1)[1]


def test_thread_and_process_when_asked(kept: tuple[logging.Logger, Keep]) -> None:
    logger, handler = kept
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = True
    logger.info("job succeeded", extra=FIELDS)
    HotLine(logger, logging.INFO, "job succeeded")(FIELDS)
    ordinary, hot = handler.records
    for key in ("thread", "threadName", "process", "processName"):
        assert getattr(hot, key) == getattr(ordinary, key)


def test_level_and_filters_apply(kept: tuple[logging.Logger, Keep]) -> None:
    logger, handler = kept
    line = HotLine(logger, logging.INFO, "job succeeded")
    logger.setLevel(logging.WARNING)
    line(FIELDS)
    assert handler.records == []
    logger.setLevel(logging.INFO)
    handler.addFilter(lambda r: r.queue != "q")  # type: ignore[attr-defined]
    line(FIELDS)
    assert handler.records == []
    line({**FIELDS, "queue": "other"})
    assert [r.queue for r in handler.records] == ["other"]  # type: ignore[attr-defined]


def test_source_lines_wanted_take_the_ordinary_path(kept: tuple[logging.Logger, Keep]) -> None:
    logger, handler = kept
    logging._srcfile = __file__  # logging's default: find each call's file and line
    HotLine(logger, logging.INFO, "job succeeded")(FIELDS)
    (record,) = handler.records
    assert record.lineno > 0
    assert record.queue == "q"  # type: ignore[attr-defined]


def test_a_record_factory_of_the_application_is_used(kept: tuple[logging.Logger, Keep]) -> None:
    logger, handler = kept
    made: list[str] = []
    default = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        made.append("yes")
        return default(*args, **kwargs)

    logging.setLogRecordFactory(factory)
    try:
        HotLine(logger, logging.INFO, "job succeeded")(FIELDS)
    finally:
        logging.setLogRecordFactory(default)
    assert made == ["yes"]
    assert handler.records[0].job_id == "abc"  # type: ignore[attr-defined]
