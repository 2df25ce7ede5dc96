"""Which model answers an agent's call: its fallback chain and its providers' rotating keys
(`ModelRouter`), and the model catalogue and stored usage as `models.list` and `usage.summary`
report them."""

from __future__ import annotations

from gateway.models.routing import ModelRouter

__all__ = ["ModelRouter"]
