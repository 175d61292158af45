"""workbook/classroom/banner.py: what the teacher reads at start (the caps, loopback or open)."""

from workbook.classroom import server as classroom_server
from workbook.classroom import students

import pytest
from student_requests import in_process

serve = pytest.fixture(in_process, name="serve")


def test_the_caps_and_how_they_are_decided_are_in_the_banner(serve):
    server, _ = serve()
    text = classroom_server.banner(server, students.LOOPBACK)
    assert "per client address: 500 connections, 300 names, 128 MB unanswered" in text
    assert "the class is full, the name quiet longest gives up its place" in text
    assert all(len(line) <= 80 for line in text.splitlines()[5:])  # the caps fit a terminal


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_localhost_is_announced_as_loopback_not_open(serve, host):
    server, _ = serve()
    assert "loopback only" in classroom_server.banner(server, host)
    assert "OPEN to the network" in classroom_server.banner(server, "0.0.0.0")
