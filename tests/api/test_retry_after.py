"""The pause a server asks for before a retry, read from its headers."""

from workbook.api.retry_after import server_wait


def test_milliseconds_come_first_then_seconds_then_a_date():
    assert server_wait({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert server_wait({"retry-after": "2"}) == 2.0
    assert server_wait({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=lambda: 1445412480.0) == 10.0


def test_an_unreadable_absent_or_non_positive_pause_is_none_so_the_caller_backs_off():
    assert server_wait({"retry-after": "soon"}) is None and server_wait({}) is None
    assert server_wait({"retry-after": "-3"}) is None  # as the SDK: only a wait above 0 is asked for
