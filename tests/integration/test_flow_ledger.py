"""The limits' books read in the order the slots were taken and given back: the fleet
tests' verdicts (most running per key) are only as good as this order."""

from __future__ import annotations

from pathlib import Path

from tests.integration import flow_ledger


def _read(tmp_path: Path, *lines: str) -> list[tuple[str, str]]:
    path = tmp_path / "ledger"
    path.write_text("".join(f"{line}\n" for line in lines))
    return [(run.event, run.job_id) for run in flow_ledger.read(path)]


def test_a_done_and_the_next_start_at_one_instant_read_done_first(tmp_path: Path) -> None:
    order = _read(tmp_path, "start k a 1 1.0", "start k b 1 2.0", "done k a 1 2.0")
    assert order == [("start", "a"), ("done", "a"), ("start", "b")]


def test_a_run_within_one_stamp_reads_start_then_done(tmp_path: Path) -> None:
    """A redelivery that returns at once (CI saw it: 'most running' came out as 0)."""
    path = tmp_path / "ledger"
    path.write_text("start k a 1 1.0\nstart k a 2 5.0\ndone k a 2 5.0\n")
    runs = flow_ledger.read(path)
    assert [(r.event, r.attempt) for r in runs] == [("start", 1), ("start", 2), ("done", 2)]
    assert flow_ledger.most_running([r for r in runs if r.at > 2]) == {"k": 1}


def test_the_partial_last_line_of_a_writer_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    path.write_text("start k a 1 1.0\ndone k a 1 2.0\nstart k b")
    assert [(r.event, r.job_id) for r in flow_ledger.read(path)] == [("start", "a"), ("done", "a")]
