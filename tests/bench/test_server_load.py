"""bench/server_load.py runs on tiny inputs and reads wrk's report (the machinery, not the figures)."""

import pytest
from system_tools import needs


def test_the_load_benchmark_runs_on_tiny_inputs():
    from bench import server_load

    result = server_load.measure(
        requests=8, students=(1, 2), storms=(3,), big_mb=1, pause_reps=0, wrk_rounds=0, long_turns=3
    )
    assert [r["students"] for r in result["levels"]] == [1, 2]
    assert all(r["errors"] == 0 and r["statuses"] == [200] and r["requests"] >= 8 for r in result["levels"])
    assert result["storms"] == [result["storms"][0] | {"n": 3, "dropped": 0}]
    assert result["stall"]["big"] == [200, 200, 200]
    assert result["too_large"]["answer"].startswith("HTTP/1.1 413")
    assert result["pauses"] is None  # each pause is a process of its own: measured just below
    # the longest another thread waited while the server parsed 1 MB, in ms: measured (the ticker ran,
    # or max() of no gaps raises), and far under a second (json_text reads a window at a time)
    assert server_load.parse_pause("parse_json", megabytes=1) < 1000
    assert "students  requests  requests/s" in server_load.report(result)
    assert result["wrk"] is None and result["held"]["body_mb"] > 0.9
    assert result["long"]["turns"] == 3 and result["long"]["remembered"] > 0 and result["long"]["whole"] > 0
    assert "3-turn conversation" in server_load.report(result)


WRK_SAMPLE = """Running 5s test @ http://127.0.0.1:8901
  Latency Distribution
     50%  402.00us
     99%    1.20s
  12000 requests in 5.00s, 1.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:   2400.50
"""


def test_the_load_benchmark_reads_wrks_report():
    from bench import server_load

    assert server_load.read_wrk(WRK_SAMPLE) == {
        "per_s": 2400.5,
        "p50": pytest.approx(0.402),
        "p99": 1200.0,
        "non_2xx": 7,
        "socket_errors": 3,
    }


@needs("wrk")
def test_the_load_benchmark_drives_the_servers_with_wrk():
    from bench import server_load

    # The machinery, not the figures: one connection, pausing 20 ms before each request, so that each
    # second of wrk costs the server some fifty requests' CPU rather than a core-second. The replay
    # server only: wrk's own scripts and output are the same for every server, so the floors are left
    # to the test above, which serves both with the Python client.
    rows = server_load.wrk_levels(students=(1,), rounds=1, seconds=1, servers=("replay",), pause_ms=20)
    assert {r["server"] for r in rows} == {"replay"}
    assert all(0 < r["per_s"] < 100 and r["non_2xx"] == 0 for r in rows), rows  # paced: not thousands
