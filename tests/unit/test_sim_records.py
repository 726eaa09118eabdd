"""The request log: bounded, list-like, counting cancellations and drops."""

from __future__ import annotations

from replica_entry.sim.records import RequestLog


def test_the_log_keeps_the_newest_records_up_to_its_bound() -> None:
    log = RequestLog(maxlen=3)
    for path in ("/a", "/b", "/c", "/d"):
        log.open("GET", path, "", None, None)
    assert [r.path for r in log] == ["/b", "/c", "/d"]
    assert (len(log), log[-1].seq, log.total) == (3, 4, 4)


def test_cancellations_and_drops_are_counted_once() -> None:
    log = RequestLog()
    record = log.open("POST", "/v1/completions", "", True, "key")
    log.mark_cancelled(record)
    log.mark_cancelled(record)
    log.mark_dropped(log.open("POST", "/v1/completions", "", True, None))
    assert (log.cancelled, log.dropped) == (1, 1)
    assert log.as_json()[0]["routing_key"] == "key"
    log.clear()
    assert (len(log), log.total, log.cancelled, log.dropped) == (0, 0, 0, 0)
