"""workbook/classroom/rung_server.py: a rung's replay server in a child process under an address-space
limit (red team five), and what it tells the grader of each request it saw."""

import io
import json
import os
from pathlib import Path
from types import SimpleNamespace

from workbook.classroom import rung_server, students
from workbook.replay import fixtures

from conftest import ROOT


def test_the_rungs_server_runs_in_a_child_under_an_address_space_limit():
    served = rung_server.RungServer(
        "grade_s01_loop", fixtures.load_fixture(ROOT / "fixtures" / "grade_s01_loop.json")
    )
    try:
        limits = Path(f"/proc/{served.proc.pid}/limits").read_text()
        assert served.proc.pid != os.getpid()
        assert f"Max address space         {rung_server.MEMORY}" in limits
    finally:
        served.close()


def test_a_programs_big_request_is_judged_in_the_child_and_reaches_the_grader_without_its_body():
    import http.client
    import tracemalloc
    from urllib.parse import urlsplit

    served = rung_server.RungServer(
        "grade_s01_loop", fixtures.load_fixture(ROOT / "fixtures" / "grade_s01_loop.json")
    )
    block = b"{}" + b" " * 30  # passes json_text's count of objects, and is still no block
    body = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[%s]}]}' % b",".join(
        [block] * (16 * 2**20 // 33)
    )
    served.runs["gprogram"] = seen = []
    tracemalloc.start()
    try:
        url = urlsplit(served.url)
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        connection.request(
            "POST", "/v1/messages", body, {"x-api-key": "gprogram", "anthropic-version": "2023-06-01"}
        )
        status = connection.getresponse().status
        served.settle()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        served.close()
    assert status == 400 and [s.body for s in seen] == [None] and "Field required" in seen[0].mistake
    assert peak < len(body) // 4  # in the grader's own process it was 2 GB for a 3 MB request


# -- what the child tells the grader -------------------------------------------------------------------


def test_a_request_is_seen_with_its_retry_count_and_the_library_helpers_that_sent_it():
    headers = {"x-stainless-retry-count": "2", "x-stainless-helper": "tool-runner, stream ,"}
    seen = rung_server.seen_of(
        "grade_s01_loop", 3, {"messages": []}, SimpleNamespace(side=True), None, headers
    )
    assert (seen.turn, seen.body, seen.mistake, seen.retry_count) == (3, {"messages": []}, None, 2)
    assert seen.helpers == ("tool-runner", "stream") and seen.side and not seen.fallback
    assert rung_server.retry_count({"x-stainless-retry-count": "two"}) == 0
    assert rung_server.retry_count({}) == 0


def test_a_big_mistaken_request_is_seen_without_its_body_a_small_one_with_it():
    big = {"messages": ["x" * rung_server.KEPT_BODY_BYTES]}
    wrong = students.Mistake("messages: Field required")
    seen = rung_server.seen_of("n", 1, big, None, wrong, {})
    assert seen.body is None and seen.mistake == "messages: Field required" and not seen.side
    small = {"messages": ["x"]}
    assert rung_server.seen_of("n", 1, small, None, wrong, {}).body == small
    assert rung_server.seen_of("n", 1, big, None, None, {}).body is big  # no mistake: the body is judged


def test_a_refused_thread_is_seen_as_the_fallback_it_is_not_as_a_mistake_to_count():
    refused = students.Mistake("threads", details={"error_code": "thread_unsupported_request"})
    assert rung_server.seen_of("n", 1, {}, None, refused, {}).fallback
    assert not rung_server.seen_of("n", 1, {}, None, students.Mistake("bad"), {}).fallback


def test_the_child_sends_each_log_line_as_one_json_line_and_skips_blank_ones():
    out = io.StringIO()
    lines = rung_server.Lines(out)
    lines.write("ada  turn 1 · 200\n\n   \nbob  turn 1 · 400\n")
    lines.send(url="http://127.0.0.1:1")
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"log": "ada  turn 1 · 200"},
        {"log": "bob  turn 1 · 400"},
        {"url": "http://127.0.0.1:1"},
    ]


def test_the_grader_keeps_the_log_and_quotes_one_students_lines():
    log = rung_server.LogLines()
    log.write("12:00 ada turn 1 · 200\n\n12:01 bob turn 1 · 400\n12:02 ada turn 2 · 200\n")
    assert log.of("ada") == ["12:00 ada turn 1 · 200", "12:02 ada turn 2 · 200"]
    assert log.of("carol") == []
