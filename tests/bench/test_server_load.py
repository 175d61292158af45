"""The classroom's load benchmark: wrk's report read, and the servers driven by it."""

import pytest
from system_tools import needs

from bench import server_load

WRK_SAMPLE = """Running 5s test @ http://127.0.0.1:8901
  Latency Distribution
     50%  402.00us
     99%    1.20s
  12000 requests in 5.00s, 1.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:   2400.50
"""


def test_wrks_report_is_read_into_its_figures():
    assert server_load.read_wrk(WRK_SAMPLE) == {
        "per_s": 2400.5,
        "p50": pytest.approx(0.402),
        "p99": 1200.0,
        "non_2xx": 7,
        "socket_errors": 3,
    }


def test_the_verdicts_compare_the_server_with_the_threaded_floor_at_50_and_judge_200_alone():
    def row(server, students, per_s, p99=5.0, non_2xx=0):
        return {"server": server, "students": students, "per_s": per_s, "p99": p99, "non_2xx": non_2xx} | {
            "socket_errors": 0
        }

    rows = [row("replay", 50, 900), row("threaded", 50, 1000), row("replay", 200, 800, p99=120, non_2xx=3)]
    assert server_load.verdicts(rows) == [
        "200 students: 3 non-2xx, 0 socket errors (goal 0), p99 120.0 ms (goal < 100 ms)",
        "50 students: 0.90x the threaded http.server's requests/s (goal >= 0.5x)",
    ]


@needs("wrk")
def test_wrk_drives_the_replay_server_and_the_floor():
    # The machinery, not the figures: one connection, pausing 20 ms before each request, so that each
    # second of wrk costs a server some fifty requests' CPU rather than a core-second.
    rows = server_load.measure(students=(1,), rounds=1, seconds=1, pause_ms=20)
    assert {r["server"] for r in rows} == {"replay", "threaded"}
    assert all(0 < r["per_s"] < 100 and r["non_2xx"] == 0 for r in rows), rows  # paced: not thousands
    assert "replay" in "\n".join(server_load.report(rows))
