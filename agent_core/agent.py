"""The stateful Agent (placeholder until it lands)."""

from __future__ import annotations


class Agent:
    pass
