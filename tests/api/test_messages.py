"""workbook/api/messages.py: messages as plain JSON, their blocks, a tool result's text, a shared start."""

from workbook.api import messages

import anthropic


def test_sdk_objects_at_any_depth_become_the_json_the_api_would_send():
    block = anthropic.types.TextBlock(type="text", text="hi")
    value = {"role": "assistant", "content": [block], "n": (1, None)}
    assert messages.plain(value) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "n": [1, None],
    }


def test_a_string_content_is_one_text_block():
    assert messages.blocks({"role": "user", "content": "go"}) == [{"type": "text", "text": "go"}]
    listed = [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]
    assert messages.blocks({"role": "user", "content": listed}) == listed


def test_a_tool_results_text_is_its_blocks_one_per_line_with_others_named():
    assert messages.result_text({"content": "plain"}) == "plain"
    parts = [{"type": "text", "text": "a"}, {"type": "image", "source": {}}, {"type": "text", "text": "b"}]
    assert messages.result_text({"content": parts}) == "a\n[image]\nb"
    assert messages.result_text({}) == "" and messages.result_text({"content": None}) == ""


def test_the_common_prefix_counts_the_messages_both_lists_start_with():
    a, b, c = ({"role": "user", "content": x} for x in "abc")
    assert messages.common_prefix([a, b], [a, b, c]) == 2  # appended
    assert messages.common_prefix([a, b, c], [a, c]) == 1  # rewritten after the first
    assert messages.common_prefix([b], [a]) == 0 and messages.common_prefix([], [a]) == 0
