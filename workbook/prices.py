"""The price table, and what one response costs by it: list prices, in dollars. An estimate: the invoice
is the truth. s05's budget spends what cost() says.

Prices are Anthropic's published list prices (anthropic.com/pricing) as of PRICES_AS_OF, written down by
hand; this workbook cannot fetch them, so check that page before trusting a figure. Models not in the
table are priced as the workbook's default model.
"""

from __future__ import annotations

PRICES_AS_OF = "2026-11-30"  # the day this table was last written down; the page may have changed since
PRICES = {"claude-sonnet-5": (3.00, 15.00)}  # model -> dollars per million tokens (input, output)
DEFAULT_MODEL = "claude-sonnet-5"  # s01's MODEL: a model missing from the table is priced as this one
# Cache writes cost more than plain input, by how long the cache is kept (Usage.cache_creation splits
# them: ephemeral_5m_input_tokens, ephemeral_1h_input_tokens); cache reads cost a tenth.
CACHE_WRITE_5M, CACHE_WRITE_1H, CACHE_READ = 1.25, 2.00, 0.10  # times the input price
WEB_SEARCH = 10.00 / 1_000  # dollars per web search request (Usage.server_tool_use.web_search_requests)


def cost(usage, model: str = DEFAULT_MODEL) -> float:
    """Estimated dollars for one response's `usage` (an anthropic.types.Usage): plain input; cache writes
    by how long they are kept (5 minutes or 1 hour; all 5-minute when the usage does not split them);
    cache reads; output; and each web search the server ran, when the request offered it that tool."""
    price_in, price_out = PRICES.get(model, PRICES[DEFAULT_MODEL])
    split = usage.cache_creation
    hour = (split.ephemeral_1h_input_tokens or 0) if split else 0
    minutes = (usage.cache_creation_input_tokens or 0) - hour
    weighted_in = usage.input_tokens + minutes * CACHE_WRITE_5M + hour * CACHE_WRITE_1H
    weighted_in += (usage.cache_read_input_tokens or 0) * CACHE_READ
    searched = usage.server_tool_use
    searches = (searched.web_search_requests or 0) if searched else 0
    return (weighted_in * price_in + usage.output_tokens * price_out) / 1_000_000 + searches * WEB_SEARCH
