"""Token usage and its price.

Prices in the catalogue are dollars per million tokens; each cost component is
``price / 1e6 * tokens`` and the total is the sum of the four components, computed in that order
so the floating-point results match pi's to the last bit.
"""

from __future__ import annotations

from agent_core.llm import Model
from agent_core.messages import Cost, Usage


def calculate_cost(model: Model, usage: Usage) -> Cost:
    """The cost of `usage` at `model`'s prices."""
    price = model.cost
    input_cost = price.input / 1_000_000 * usage.input
    output_cost = price.output / 1_000_000 * usage.output
    cache_read_cost = price.cache_read / 1_000_000 * usage.cache_read
    cache_write_cost = price.cache_write / 1_000_000 * usage.cache_write
    return Cost(
        input=input_cost,
        output=output_cost,
        cache_read=cache_read_cost,
        cache_write=cache_write_cost,
        total=input_cost + output_cost + cache_read_cost + cache_write_cost,
    )


def make_usage(
    model: Model, *, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0
) -> Usage:
    """A `Usage` with its total and its cost at `model`'s prices."""
    usage = Usage(
        input=input,
        output=output,
        cache_read=cache_read,
        cache_write=cache_write,
        total_tokens=input + output + cache_read + cache_write,
    )
    usage.cost = calculate_cost(model, usage)
    return usage
