"""Real clients against the classroom: what a class points at `python -m workbook serve` and
`python -m workbook grade`, walking s01 and s02.

The clients are the ones tests/clients/node/ pins (`npm ci` there: .ci/run does it, and so does this
module when they are missing): Claude Code and the TypeScript SDK. The Python SDK is tested throughout
(test_ladder.py, test_students.py). Without Node.js and npm these tests skip, naming them; under
.ci/run (WORKBOOK_REQUIRE_TOOLS=1) they fail instead, and so does a client that cannot be installed.

The requests Claude Code sends are kept in tests/classroom/clients/ (captured by
tests/clients/capture_proxy.py, scrubbed by tests/clients/keep_capture.py): each file says which rule
refused it before the rules of issue 38 and what the rule is now: the comparison compares what the
lesson is about (workbook/api/compare.py, Match.CONVERSATION), the contract takes what the API takes
(system messages, sampling fields), and side requests use no recorded turn (workbook/replay/player.py).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from workbook.replay import fixtures

import pytest
from conftest import ROOT
from grading import LOOPS, failures, graded, no_waiting  # noqa: F401  (autouse: no sleeping the waits)
from system_tools import check

NODE_CLIENTS = ROOT / "tests" / "clients" / "node"
CAPTURES = ROOT / "tests" / "classroom" / "clients"
SERVED = ("s01_hello_agent", "s02_fix_divide_by_zero")
MODELS = (
    "opus",
    "sonnet",
    "haiku",
)  # Claude Code's aliases: claude-opus-4-8, claude-sonnet-5, claude-haiku-4-5

# -- the clients, installed as the lock file says -----------------------------------------------------


def installed_version(package: str) -> str | None:
    manifest = NODE_CLIENTS / "node_modules" / package / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.is_file() else None


@pytest.fixture(scope="module")
def node_clients() -> dict[str, str]:
    """tests/clients/node/ as package-lock.json has it (`npm ci` when a pinned version is missing), and
    the paths of node and claude. Without node and npm the test skips (tests/system_tools.py); a client
    that cannot be installed fails the test that asked, with what to do."""
    check("node")
    node, npm = shutil.which("node"), shutil.which("npm")
    pinned = json.loads((NODE_CLIENTS / "package.json").read_text())["dependencies"]
    if any(installed_version(name) != version for name, version in pinned.items()):
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=NODE_CLIENTS,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            pytest.fail(f"npm ci in tests/clients/node failed (exit {done.returncode}): {said}")
    claude = NODE_CLIENTS / "node_modules" / ".bin" / "claude"
    version = subprocess.run([claude, "--version"], capture_output=True, text=True, timeout=60)
    wanted = pinned["@anthropic-ai/claude-code"]
    if version.returncode != 0 or not version.stdout.startswith(wanted):
        pytest.fail(
            f"claude --version said {version.stdout or version.stderr!r}, not {wanted}: run npm ci again"
        )
    return {"node": node, "claude": str(claude)}


def test_the_pinned_clients_install_and_report_their_versions(node_clients):
    pinned = json.loads((NODE_CLIENTS / "package.json").read_text())["dependencies"]
    assert pinned == {"@anthropic-ai/claude-code": "2.1.197", "@anthropic-ai/sdk": "1.15.0"}
    assert {name: installed_version(name) for name in pinned} == pinned
    lock = json.loads((NODE_CLIENTS / "package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"] == pinned  # npm ci installs exactly these


# -- a classroom server, as a teacher starts it ----------------------------------------------------------


class Server:
    """`python -m workbook serve` on a free port: its URL, its class table, and what it printed."""

    def __init__(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "workbook", "serve", *(f"fixtures/{name}.json" for name in SERVED)]
        command += ["--port", str(port), "--max-names-per-address", "1000"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")} | {
            "PYTHONUNBUFFERED": "1"
        }
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self.banner = []
        for line in self.proc.stdout:  # the banner names the URL once it listens
            self.banner.append(line.decode(errors="replace"))
            if f"127.0.0.1:{port}" in self.banner[-1]:
                break
        else:
            raise AssertionError(f"the replay server did not start: {''.join(self.banner)}")
        # its log goes on, a line a request: read it, or a full pipe would stop the server
        self.log: list[bytes] = []
        threading.Thread(target=self.log.extend, args=(self.proc.stdout,), daemon=True).start()

    def row(self, student: str) -> dict:
        asked = urllib.request.Request(f"{self.url}/replay/status", headers={"x-api-key": student})
        with urllib.request.urlopen(asked, timeout=30) as answer:  # a student sees their own row
            rows = [r for r in json.loads(answer.read())["students"] if r["student"] == student]
        assert len(rows) == 1, rows
        return rows[0]

    def post(self, capture: dict, student: str) -> tuple[int, bytes]:
        """A captured request sent again as its client sent it, under another student's name."""
        headers = capture["headers"] | {"x-api-key": student, "x-replay-fixture": capture["fixture"]}
        data = json.dumps(capture["body"]).encode()
        request = urllib.request.Request(
            self.url + capture["path"], data=data, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def server():
    running = Server()
    yield running
    running.stop()


# -- the requests Claude Code sent, sent again ----------------------------------------------------------


def capture(name: str) -> dict:
    return json.loads((CAPTURES / f"{name}.json").read_text())


def earlier_turns(last: dict) -> list[dict]:
    """Turn 1 to the captured turn of a conversation: a client resends the history each turn, so turn k's
    request is the captured one's messages up to its k-th assistant turn (a system message after a user
    turn stays with it)."""
    messages = last["body"]["messages"]
    cuts = [i for i, m in enumerate(messages) if m["role"] == "assistant"] + [len(messages)]
    return [
        last | {"turn": k + 1, "body": last["body"] | {"messages": messages[:cut]}}
        for k, cut in enumerate(cuts)
    ]


def recorded_turns(fixture: str) -> list[dict]:
    """A fixture's own requests (what the workbook's steps send), as captures of a plain client."""
    exchanges = fixtures.load_fixture(ROOT / "fixtures" / f"{fixture}.json")["exchanges"]
    headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    return [
        {"fixture": fixture, "path": "/v1/messages", "headers": headers, "body": e["request"]}
        for e in exchanges
    ]


WALKS = {  # a client's requests in the order it sent them; each walk ends on the recording's last turn
    "claude_code_opus_s01": [
        capture("claude_code_opus_title"),
        *earlier_turns(capture("claude_code_opus_s01_turn2")),
    ],
    "claude_code_sonnet_s01": [capture("claude_code_sonnet_s01_turn1"), recorded_turns("s01_hello_agent")[1]],
    "claude_code_haiku_s01": [
        capture("claude_code_haiku_title"),
        *earlier_turns(capture("claude_code_haiku_s01_turn2")),
    ],
    "claude_code_opus_s02": earlier_turns(capture("claude_code_opus_s02_turn6")),
    "claude_code_haiku_s02": earlier_turns(capture("claude_code_haiku_s02_turn6")),
    "claude_code_quota_probe": [capture("claude_code_quota_probe"), *recorded_turns("s01_hello_agent")],
    "claude_code_count_tokens": [capture("claude_code_count_tokens"), *recorded_turns("s01_hello_agent")],
    "python_sdk_tool_runner_fallback": [
        capture("python_sdk_tool_runner_fallback"),
        recorded_turns("s01_hello_agent")[1],
    ],
    "typescript_sdk_plain_loop": earlier_turns(capture("typescript_sdk_plain_loop_turn2")),
}
SIDE_REQUESTS = {"claude_code_opus_s01": 1, "claude_code_haiku_s01": 1, "claude_code_quota_probe": 1}
SIDE_REQUESTS["claude_code_count_tokens"] = 1


@pytest.mark.parametrize("walk", list(WALKS))
def test_the_requests_a_client_sent_walk_the_recording_and_its_side_requests_use_no_turn(walk, server):
    requests = WALKS[walk]
    answers = [server.post(request, walk) for request in requests]
    assert [status for status, _ in answers] == [200] * len(requests), [body[:300] for _, body in answers]
    turns = len(fixtures.load_fixture(ROOT / "fixtures" / f"{requests[-1]['fixture']}.json")["exchanges"])
    row = server.row(walk)
    assert (row["turn"], row["turns"], row["mistakes"], row["restarts"]) == (turns, turns, 0, 0), row
    assert row["side"] == SIDE_REQUESTS.get(walk, 0), row  # the class table marks them
    for request, (_, body) in zip(requests, answers):
        if request["path"].startswith("/v1/messages/count_tokens"):
            assert isinstance(json.loads(body)["input_tokens"], int)


def test_every_kept_capture_says_what_refuses_it_and_what_the_rule_should_be():
    kept = sorted(CAPTURES.glob("*.json"))
    assert len(kept) >= 10
    for path in kept:
        held = json.loads(path.read_text())
        assert {"client", "how", "source", "kind", "refused", "rule", "path", "headers", "body"} <= set(
            held
        ), path
        text = path.read_text()
        assert "/tmp/" not in text and "sk-ant-" not in text, f"{path.name}: scrub it again"


# -- Claude Code itself, as a student runs it ------------------------------------------------------------

TASKS = {name: fixtures.load_fixture(ROOT / "fixtures" / f"{name}.json")["task"] for name in SERVED}


def workspace_copy(fixture: str, tmp_path: Path) -> Path:
    """The fixture's workspace, copied where the client may change it."""
    folder = fixtures.load_fixture(ROOT / "fixtures" / f"{fixture}.json")["workspace"]
    return Path(shutil.copytree(ROOT / "fixtures" / "workspace" / folder, tmp_path / "work"))


def claude_code_env(home: Path, url: str, student: str, fixture: str) -> dict:
    """What a student sets: the server and their name; the fixture by header (the model is Claude Code's);
    no telemetry, error reports or updates (there is no internet), but the rest of its traffic, the title
    side request included, as it comes."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": student,
        "ANTHROPIC_CUSTOM_HEADERS": f"x-replay-fixture: {fixture}",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def by_model():
    for model in MODELS:
        for fixture in SERVED:
            yield pytest.param(model, fixture, id=f"{model}-{fixture[:3]}")


@pytest.mark.parametrize("model, fixture", list(by_model()))
def test_claude_code_walks_the_recording_on_the_classroom_server(
    model, fixture, node_clients, server, tmp_path
):
    workspace = workspace_copy(fixture, tmp_path)
    (tmp_path / "home").mkdir()
    student = f"cc-{model}-{fixture[:3]}"
    done = subprocess.run(
        [node_clients["claude"], "--allowedTools", "Bash", "--model", model, "-p", TASKS[fixture]],
        cwd=workspace,
        env=claude_code_env(tmp_path / "home", server.url, student, fixture),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    row = server.row(student)
    assert done.returncode == 0, (done.stdout + done.stderr)[-600:]
    assert (row["turn"], row["mistakes"]) == (row["turns"], 0), row


@pytest.mark.parametrize("model", MODELS)
def test_claude_code_walks_the_s01_and_s02_rungs_under_the_grader(model, node_clients, capsys):
    """As a teacher grades it: the task as the last argument, the grader's own environment (nothing of
    the teacher's shell), in the sandbox when there is one."""
    command = [node_clients["claude"], "--allowedTools", "Bash", "--model", model, "-p"]
    code, rows = graded(capsys, "--only", "s01,s02", "--timeout", "300", "--", *command)
    assert failures(rows) == {} and code == 0


# -- the TypeScript SDK's plain loop ------------------------------------------------------------------------


def test_the_typescript_sdks_plain_loop_walks_the_s01_s02_and_s04_rungs(node_clients, capsys):
    code, rows = graded(
        capsys, "--only", "s01,s02,parallel", "--", node_clients["node"], str(LOOPS / "sdk_loop.js")
    )
    assert failures(rows) == {} and code == 0
    assert {row["passed_by"] for row in rows.values()} == {"loop"}


@pytest.mark.parametrize("fixture", SERVED)
def test_the_typescript_sdks_plain_loop_walks_the_recording_on_the_classroom_server(
    fixture, node_clients, server, tmp_path
):
    student = f"ts-{fixture[:3]}"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": server.url}
    env |= {"ANTHROPIC_API_KEY": student, "MODEL_ID": f"replay:{fixture}"}  # the model names the fixture
    done = subprocess.run(
        [node_clients["node"], str(LOOPS / "sdk_loop.js"), TASKS[fixture]],
        cwd=workspace_copy(fixture, tmp_path),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    row = server.row(student)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (row["turn"], row["mistakes"]) == (row["turns"], 0), row


# -- the recorded task: the grader passes it; a loop that sends another is told which ----------------


def test_a_loop_that_sends_its_own_task_instead_of_the_recorded_one_is_told_to_send_it(tmp_path, capsys):
    source = (LOOPS / "plain_loop.py").read_text()
    assert source.count("main(sys.argv[1])") == 1  # the grader's task, from argv
    own_task = tmp_path / "own_task.py"
    own_task.write_text(source.replace("main(sys.argv[1])", 'main("say hi")'))
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, str(own_task))
    task = fixtures.load_fixture(ROOT / "fixtures" / "grade_s01_loop.json")["task"]
    assert code == 1 and rows["loop"]["reason"] == (
        "turn 1: grade_s01_loop, turn 1: your request differs from the recording: messages[0]: your first "
        f'user turn does not carry the recorded task; send "{task}" as the task (a text block of its own, as '
        "the recording does)"
    )
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, str(LOOPS / "plain_loop.py"))
    assert code == 0 and rows["loop"]["passed"]  # the same loop, given the task as argv
