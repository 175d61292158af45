"""The pause a server asks for before a retry, read from its headers."""

from workbook.api.retry_after import server_wait


def test_milliseconds_come_first_then_seconds_then_a_date():
    assert server_wait({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert server_wait({"retry-after": "2"}) == 2.0
    assert server_wait({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=lambda: 1445412480.0) == 10.0


def test_an_unreadable_or_absent_pause_is_none_and_a_past_one_is_zero():
    assert server_wait({"retry-after": "soon"}) is None and server_wait({}) is None
    assert server_wait({"retry-after": "-3"}) == 0.0
