"""The price table s05's cost estimate reads: list prices, in dollars. An estimate: the invoice is the truth.

Prices are Anthropic's published list prices (anthropic.com/pricing) as of PRICES_AS_OF, written down by
hand; this workbook cannot fetch them, so check that page before trusting a figure. Models not in the
table are priced as the workbook's default model.
"""

from __future__ import annotations

PRICES_AS_OF = "2026-11-30"  # the day this table was last written down; the page may have changed since
PRICES = {"claude-sonnet-5": (3.00, 15.00)}  # model -> dollars per million tokens (input, output)
# Cache writes cost more than plain input, by how long the cache is kept (Usage.cache_creation splits
# them: ephemeral_5m_input_tokens, ephemeral_1h_input_tokens); cache reads cost a tenth.
CACHE_WRITE_5M, CACHE_WRITE_1H, CACHE_READ = 1.25, 2.00, 0.10  # times the input price
WEB_SEARCH = 10.00 / 1_000  # dollars per web search request (Usage.server_tool_use.web_search_requests)
