"""Risk tiers of exec mediation and the sink that rules report findings to."""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol


class RiskTier(IntEnum):
    """How bad a command could be, ordered: ``NONE < LOW < MEDIUM < HIGH < CRITICAL``.

    LOW: worth a log line (runs as another user). MEDIUM: risky but commonly legitimate
    (``chmod 777 file``, deleting inside a system directory). HIGH: escapes or subverts the
    sandbox's intent (pipe-to-shell, credential files, reverse shells, shutdown, killing pid 1).
    CRITICAL: destroys a machine or its data (deleting / or home, device writes, fork bombs).
    """

    NONE = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int) -> RiskTier:
        """A tier from its name (``"high"``, any case) or number; raises `ValueError` otherwise."""
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                names = ", ".join(tier.label for tier in cls)
                raise ValueError(f"unknown risk tier {value!r}; expected one of {names}") from None
        return cls(value)


class FindingSink(Protocol):
    """What a rule reports to: findings, and command lines to analyse in turn."""

    def add(self, risk: RiskTier, danger_class: str, reason: str) -> None: ...

    def resolve(self, path: str) -> str:
        """`path` as seen from the directory the command runs in (after a ``cd``)."""
        ...

    def analyze_text(self, text: str) -> None: ...

    def analyze_words(self, words: list[str]) -> None: ...
