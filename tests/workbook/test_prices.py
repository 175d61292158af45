"""The price table and what a response costs by it."""

from workbook import prices

import anthropic
import pytest

import s01_agent_loop


def test_a_model_missing_from_the_table_is_priced_as_the_courses_own_model():
    assert prices.DEFAULT_MODEL == s01_agent_loop.MODEL and prices.DEFAULT_MODEL in prices.PRICES
    usage = anthropic.types.Usage(input_tokens=1000, output_tokens=100)
    assert prices.cost(usage, "a-model-not-in-the-table") == prices.cost(usage) == pytest.approx(0.0045)


def test_cache_writes_are_priced_by_how_long_they_are_kept_and_unsplit_ones_as_five_minutes():
    split = anthropic.types.Usage(
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=3_000_000,
        cache_creation={"ephemeral_5m_input_tokens": 1_000_000, "ephemeral_1h_input_tokens": 2_000_000},
    )
    unsplit = anthropic.types.Usage(input_tokens=0, output_tokens=0, cache_creation_input_tokens=3_000_000)
    assert prices.cost(split) == pytest.approx(1 * 3.75 + 2 * 6.00)
    assert prices.cost(unsplit) == pytest.approx(3 * 3.75)


def test_each_web_search_the_server_ran_is_priced_beside_the_tokens():
    searched = anthropic.types.Usage(
        input_tokens=1000,
        output_tokens=100,
        server_tool_use={"web_search_requests": 3, "web_fetch_requests": 0},
    )
    assert prices.cost(searched) == pytest.approx(0.0045 + 3 * prices.WEB_SEARCH)
    assert prices.WEB_SEARCH == pytest.approx(0.01)  # $10 a thousand
