"""What the server-held thread tests (tests/api/test_threads.py) and the compaction tests
(tests/api/test_compaction.py) share: the fixtures they replay, a classroom server in a thread, and a
client that logs every exchange."""

import io
import json
import threading
from contextlib import contextmanager

from workbook.api.compare import Match
from workbook.classroom import server as classroom_server
from workbook.classroom import students
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import httpx2
from conftest import ROOT

S01 = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
S02 = fixtures.load_fixture(ROOT / "fixtures" / "s02_fix_divide_by_zero.json")  # six turns, one parallel
PAUSED = fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json")  # a turn paused twice, resumed
FIXTURES = {"s01_hello_agent": S01, "s02_fix_divide_by_zero": S02, "s06_pause_turn": PAUSED}
MODEL = "claude-sonnet-5"


class LoggedTransport(httpx2.BaseTransport):
    """Real HTTP, with each request body and the status it got kept, as a logging proxy would."""

    def __init__(self):
        self.inner = httpx2.HTTPTransport()
        self.log: list[tuple[dict, int]] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.read() or b"{}")
        response = self.inner.handle_request(request)
        self.log.append((body, response.status_code))
        return response


@contextmanager
def serving():
    """A replay server for the fixtures on a free loopback port (each test module's `server` fixture)."""
    served = classroom_server.ReplayServer(FIXTURES, port=0, out=io.StringIO())
    threading.Thread(target=served.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield served
    served.shutdown()
    served.server_close()


def server_client(server, fixture_name: str, student: str = "alice"):
    """The SDK pointed at the server, picking the fixture by header; the transport's log of exchanges."""
    logged = LoggedTransport()
    client = anthropic.Anthropic(
        api_key=student,
        base_url=server.url,
        http_client=anthropic.DefaultHttpxClient(transport=logged),
        default_headers={students.FIXTURE_HEADER: fixture_name},
        max_retries=0,
    )
    return client, logged


def s01_client(where: str, server, student: str = "alice"):
    """A client on s01's fixture, in process (conversation matching) or through the server (each test
    module's `client_for` fixture)."""
    if where == "in-process":
        return replay.replay_client(S01, "s01", match=Match.CONVERSATION, max_retries=0)[0]
    return server_client(server, "s01_hello_agent", student)[0]


def answers_to(message) -> list:
    results = [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"} for b in message.content]
    return [{"role": "user", "content": results}]
