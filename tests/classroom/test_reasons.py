"""workbook/classroom/reasons.py: the grader's reasons in the student's terms — the first mistake, with
the server's words and a hint; a crash told by the program's own error and line. How they show in a
whole grading run is in test_grade.py and test_grade_report.py."""

import copy

from workbook.api import compare
from workbook.classroom import ladder, reasons
from workbook.replay import fixtures

from conftest import ROOT


def seen(turn: int, messages: list, mistake: str | None = None) -> reasons.Seen:
    return reasons.Seen(turn, {"messages": messages}, mistake)


USER = {"role": "user", "content": "find it"}


def test_a_block_count_mismatch_lists_the_block_types_on_each_side_after_the_servers_words():
    searched = ["text", "server_tool_use", "web_search_tool_result"]
    recorded = [USER, {"role": "assistant", "content": [{"type": t} for t in searched]}, USER]
    sent = [
        USER,
        {"role": "assistant", "content": [{"type": "text"}, {"type": "web_search_tool_result"}]},
        USER,
    ]
    exchanges = [{"request": {"messages": recorded}, "response": {"status": 529}}]
    words = "messages[1]: expected 3 content blocks, got 2"
    assert reasons.explain_mistake(seen(1, sent, words), exchanges) == (
        f"turn 1: {words}. Hint: messages[1]: expected text, server_tool_use, web_search_tool_result; "
        "got text, web_search_tool_result"
    )


def test_a_split_turn_gets_one_explanation_the_servers():
    tool_uses = [{"type": "tool_use", "id": f"t{n}"} for n in range(3)]
    answer = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}"}]} for n in range(3)
    ]
    recorded = [USER, {"role": "assistant", "content": [{"type": "text"}, *tool_uses]}]
    recorded.append(
        {"role": "user", "content": [block for message in answer for block in message["content"]]}
    )
    sent = [USER, {"role": "assistant", "content": [{"type": "text"}, tool_uses[0]]}, answer[0]]
    for n in (1, 2):
        sent += [{"role": "assistant", "content": [tool_uses[n]]}, answer[n]]
    words = compare.request_diff({"messages": recorded}, {"messages": sent}, compare.Match.CONVERSATION)
    assert words.endswith("messages[1]: expected text, tool_use, tool_use, tool_use; got text, tool_use")
    exchanges = [{"request": {"messages": recorded}, "response": {"status": 529}}]
    assert reasons.explain_mistake(seen(1, sent, words), exchanges) == f"turn 1: {words}"


def rung(name: str) -> ladder.Rung:
    return next(r for r in ladder.RUNGS if r.name == name)


def streamed_count_run(result: dict) -> reasons.Seen:
    """streamed-input's second request, its call answered by `result` (the tool_use came back whole)."""
    exchanges = fixtures.load_fixture(ROOT / "fixtures" / "grade_s06_streamed_tool_input.json")["exchanges"]
    messages = copy.deepcopy(exchanges[1]["request"]["messages"])
    messages[-1]["content"] = [result]
    return seen(2, messages)


def test_a_streamed_call_answered_with_an_error_is_named_as_that_not_as_input_assembly():
    said = "<tool_use_error>No such tool available: bash. Tool names are case-sensitive</tool_use_error>"
    error = {"type": "tool_result", "tool_use_id": "toolu_01GradeS05Count", "content": said, "is_error": True}
    reason = reasons.output_missing(rung("streamed-input"), streamed_count_run(error))
    assert reason.startswith(f'turn 2: your tool_result for toolu_01GradeS05Count is an error, "{said}", so')
    assert "the model called the tool `bash` with" in reason and "a tool name is case-sensitive" in reason
    assert "input_json_delta" not in reason
    other = error | {"content": "12", "is_error": False}
    reason = reasons.output_missing(rung("streamed-input"), streamed_count_run(other))
    assert reason.startswith(
        "turn 2: your tool_result for toolu_01GradeS05Count holds \"12\", not 'notes.txt:1'"
    )


def test_a_cut_tool_use_sent_back_gets_the_same_hint_from_every_client():
    exchanges = fixtures.load_fixture(ROOT / "fixtures" / "grade_s06_cut_tool_use.json")["exchanges"]
    task = exchanges[0]["request"]["messages"][0]
    cut = {"role": "assistant", "content": exchanges[0]["response"]["body"]["content"]}
    answered = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": "not run", "is_error": True}
        for b in cut["content"]
        if b["type"] == "tool_use"
    ]
    plain = [task, cut, {"role": "user", "content": answered}]
    reminder = {"type": "text", "text": "<system-reminder>a client's own</system-reminder>"}
    claude_code = [
        {"role": "user", "content": [reminder, {"type": "text", "text": task["content"]}]},
        {"role": "system", "content": "a client's own instructions"},
        cut,
        {"role": "user", "content": [*answered, reminder]},
    ]
    hints = set()
    for sent in (plain, claude_code):
        words = compare.request_diff(exchanges[1]["request"], {"messages": sent}, compare.Match.CONVERSATION)
        hints.add(reasons.explain_mistake(seen(2, sent, words), exchanges).split(". Hint: ")[1])
    assert hints == {
        "turn 1's reply was cut off by max_tokens inside a tool_use, and your loop ran it or sent it back; a "
        "cut tool_use is incomplete: send the same request again, without the cut reply, with a larger "
        "max_tokens"
    }
    assert rung("cut-tool-use").checks.endswith("the same request goes again with a larger max_tokens")


def test_the_sdks_retries_are_counted_alike_in_the_reason_and_the_library_field():
    exchanges = fixtures.load_fixture(ROOT / "fixtures" / "grade_s03_retries.json")
    first = exchanges["exchanges"][0]["request"]["messages"]
    run = [reasons.Seen(1, {"messages": first}, None, count) for count in (0, 1, 2)]
    verdict = reasons.judge(rung("retries"), exchanges, reasons.Outcome(run, 1, "", []))
    assert verdict.problem == f"{verdict.library[0]}. {reasons.SDK_RETRY_FIX}"
    assert verdict.library == ["the SDK retried for you (x-stainless-retry-count: 1, 2)"]


def test_a_mid_conversation_system_message_keeps_the_servers_words_alone():
    recorded = [USER]
    sent = [USER, {"role": "system", "content": "be brief"}]
    words = 'messages[1].role: Input should be "user" or "assistant", got "system"'
    exchanges = [{"request": {"messages": recorded}, "response": {"status": 529}}]
    assert reasons.explain_mistake(seen(1, sent, words), exchanges) == f"turn 1: {words}"


def test_a_dropped_assistant_turn_is_named_as_that_not_as_starting_over():
    results = {"role": "user", "content": "the output was 3"}
    assert reasons.dropped_reply(seen(1, [USER, results]), 1) == (
        "turn 2: your loop dropped the assistant's reply: messages[0] and messages[1] are both user turns, "
        "which the API reads as one; append each reply before the next user turn"
    )
    assert reasons.dropped_reply(seen(1, [USER]), 1) is None  # that one did start over


# -- a crash, in the program's own words ---------------------------------------------------------------

NODE_CRASH = """\
/home/student/loop/node_modules/@anthropic-ai/sdk/client.js:700
                throw new Errors.APIConnectionError({ cause: response });
                      ^

OverloadedError: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
    at APIError.generate (/home/student/loop/node_modules/@anthropic-ai/sdk/core/error.js:78:20)
    at Anthropic.makeStatusError (/home/student/loop/node_modules/@anthropic-ai/sdk/client.js:430:32)
    at Anthropic.makeRequest (/home/student/loop/node_modules/@anthropic-ai/sdk/client.js:700:23)
    at async main (/home/student/loop/agent.js:35:22) {
  status: 529,
  headers: Headers {},
  error: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }
}

Node.js v20.20.2
"""

PYTHON_CRASH = """\
Traceback (most recent call last):
  File "/home/student/loop/agent.py", line 58, in <module>
    main(sys.argv[1])
  File "/home/student/loop/agent.py", line 40, in main
    response = client.messages.create(
  File "/home/student/.venv/lib/python3.11/site-packages/anthropic/_base_client.py", line 1047, in request
    raise self._make_status_error_from_response(err.response) from None
anthropic.InternalServerError: Error code: 529 - {'type': 'error', 'error': {'type': 'overloaded_error'}}
"""


def test_a_node_crash_is_told_by_its_error_and_the_programs_own_line_not_the_node_version():
    assert reasons.crash_line(NODE_CRASH) == (
        'OverloadedError: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}} '
        "(at agent.js:35)"
    )


def test_a_python_crash_is_told_by_its_exception_and_the_programs_own_line_not_the_librarys():
    assert reasons.crash_line(PYTHON_CRASH) == (
        "anthropic.InternalServerError: Error code: 529 - {'type': 'error', 'error': {'type': "
        "'overloaded_error'}} (at agent.py:40)"
    )


def test_a_long_error_is_cut_with_an_ellipsis_and_keeps_where_it_came_from():
    said = reasons.crash_line(PYTHON_CRASH.replace("overloaded_error", "overloaded_error" * 20))
    assert len(said) == 160 and said.endswith("… (at agent.py:40)")


def test_output_that_is_no_crash_is_told_by_its_last_line():
    assert reasons.crash_line("done\nNode.js is great\n") is None
    out = reasons.Outcome([], 1, "working\nstopped: the API answered 400\n", [])
    assert out.last_line == "stopped: the API answered 400"
