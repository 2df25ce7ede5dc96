"""When a job is due: schedules and their slots.

A *slot* is an instant (Unix milliseconds) at which a job is due. A schedule is one of OpenClaw's
three kinds, in their wire shape:

- `{"kind": "cron", "expr": "30 7 * * 1-5", "tz": "Europe/Berlin"}`: a cron expression (five
  fields, or six with seconds first) read on the wall clock of the IANA time zone `tz` (UTC when
  absent). Daylight-saving time follows Debian's cron, as the `cronsim` package implements it: a
  job at a fixed time that the spring-forward gap skips runs at the first instant after the gap
  (02:30 on Europe/Berlin's spring-forward day runs at 03:00 CEST), and a fixed time that occurs
  twice on the fall-back day runs once, at its first occurrence. An expression with `*` in its
  minute or hour field matches every real instant (an hourly job runs in both copies of the
  repeated hour).
- `{"kind": "every", "everyMs": 3600000, "anchorMs": 0}`: the slots `anchorMs + k * everyMs`;
  without `anchorMs` the anchor is the job's origin (when it was created, enabled or
  rescheduled), so the first slot is one period after that.
- `{"kind": "at", "at": "2026-12-24T18:00:00+01:00"}`: one instant (ISO 8601; UTC when the text
  has no offset).

Schedules are values. Parsing validates everything (`InvalidJob` names the field); computing
slots never reads a clock: the caller passes the instants, and the job's `origin_ms`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from gateway.automation.errors import InvalidJob

__all__ = [
    "MIN_EVERY_MS",
    "AtSchedule",
    "CronSchedule",
    "EverySchedule",
    "Schedule",
    "parse_schedule",
]

MIN_EVERY_MS = 1000
"""The shortest interval an `every` schedule may have."""
SUPPORTED_KINDS = ("cron", "every", "at")
_FORWARD_TRIES = 4
"""How many matches `next_after` reads past one that is not later in absolute time (a wall-clock
match in the repeated hour of a fall-back day can lie before the instant asked about)."""


class Schedule(Protocol):
    """The slots of a job. `origin_ms` is when the job became live (created, enabled or
    rescheduled); only `every` schedules without an anchor depend on it."""

    @property
    def kind(self) -> str: ...

    def next_after(self, after_ms: int, origin_ms: int) -> int | None:
        """The first slot later than `after_ms`; None when there is none."""
        ...

    def due(self, after_ms: int, until_ms: int, origin_ms: int, limit: int) -> tuple[list[int], bool]:
        """The newest `limit` slots in `(after_ms, until_ms]`, oldest first, and whether older
        slots in that range were left out."""
        ...

    def wire(self) -> dict[str, Any]:
        """The schedule as the protocol writes it."""
        ...


@dataclass(frozen=True)
class CronSchedule:
    expr: str
    tz: str | None = None
    _zone: tzinfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_zone", _zone(self.tz))
        try:
            CronSim(self.expr, datetime(2000, 1, 1, tzinfo=self._zone))
        except CronSimError as exc:
            raise InvalidJob(f"schedule.expr: {exc} in {self.expr!r}") from None

    @property
    def kind(self) -> str:
        return "cron"

    def next_after(self, after_ms: int, origin_ms: int) -> int | None:
        matches = CronSim(self.expr, _local(after_ms, self._zone))
        for _ in range(_FORWARD_TRIES):
            try:
                slot = _ms(next(matches))
            except StopIteration:
                return None
            if slot > after_ms:
                return slot
        return None

    def due(self, after_ms: int, until_ms: int, origin_ms: int, limit: int) -> tuple[list[int], bool]:
        if until_ms <= after_ms or limit < 1:
            return [], False
        # Backwards from just after `until_ms` (cronsim works in whole seconds), so the work is
        # bounded by `limit` however long ago `after_ms` is.
        start = _local((until_ms // 1000 + 1) * 1000, self._zone)
        matches = CronSim(self.expr, start, reverse=True)
        found: list[int] = []
        while True:
            try:
                slot = _ms(next(matches))
            except StopIteration:
                return sorted(found), False
            if slot <= after_ms:
                return sorted(found), False
            if slot > until_ms or slot in found:
                continue
            if len(found) == limit:
                return sorted(found), True
            found.append(slot)

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "cron", "expr": self.expr}
        if self.tz is not None:
            out["tz"] = self.tz
        return out


@dataclass(frozen=True)
class EverySchedule:
    every_ms: int
    anchor_ms: int | None = None

    def __post_init__(self) -> None:
        if self.every_ms < MIN_EVERY_MS:
            raise InvalidJob(f"schedule.everyMs: must be at least {MIN_EVERY_MS} (one second)")

    @property
    def kind(self) -> str:
        return "every"

    def _anchor(self, origin_ms: int) -> int:
        return origin_ms if self.anchor_ms is None else self.anchor_ms

    def next_after(self, after_ms: int, origin_ms: int) -> int | None:
        anchor = self._anchor(origin_ms)
        return anchor + ((after_ms - anchor) // self.every_ms + 1) * self.every_ms

    def due(self, after_ms: int, until_ms: int, origin_ms: int, limit: int) -> tuple[list[int], bool]:
        anchor = self._anchor(origin_ms)
        first = (after_ms - anchor) // self.every_ms + 1
        last = (until_ms - anchor) // self.every_ms
        if last < first or limit < 1:
            return [], False
        start = max(first, last - limit + 1)
        return [anchor + k * self.every_ms for k in range(start, last + 1)], start > first

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "every", "everyMs": self.every_ms}
        if self.anchor_ms is not None:
            out["anchorMs"] = self.anchor_ms
        return out


@dataclass(frozen=True)
class AtSchedule:
    at: str
    at_ms: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "at_ms", _parse_instant(self.at))

    @property
    def kind(self) -> str:
        return "at"

    def next_after(self, after_ms: int, origin_ms: int) -> int | None:
        return self.at_ms if self.at_ms > after_ms else None

    def due(self, after_ms: int, until_ms: int, origin_ms: int, limit: int) -> tuple[list[int], bool]:
        if after_ms < self.at_ms <= until_ms and limit >= 1:
            return [self.at_ms], False
        return [], False

    def wire(self) -> dict[str, Any]:
        return {"kind": "at", "at": self.at}


def parse_schedule(data: Any) -> Schedule:
    """The schedule a wire object describes. Raises InvalidJob naming the field at fault."""
    if not isinstance(data, Mapping):
        raise InvalidJob("schedule: must be an object")
    kind = data.get("kind")
    if kind == "cron":
        _only(data, "kind", "expr", "tz", "staggerMs")
        expr = _text(data, "expr")
        tz = data.get("tz")
        if tz is not None and not isinstance(tz, str):
            raise InvalidJob("schedule.tz: must be a string")
        if data.get("staggerMs") not in (None, 0):
            raise InvalidJob("schedule.staggerMs: not supported by this gateway (leave it out)")
        return CronSchedule(" ".join(expr.split()), tz or None)
    if kind == "every":
        _only(data, "kind", "everyMs", "anchorMs")
        every = data.get("everyMs")
        anchor = data.get("anchorMs")
        if not isinstance(every, int) or isinstance(every, bool):
            raise InvalidJob("schedule.everyMs: must be an integer (milliseconds)")
        if anchor is not None and (not _is_int(anchor) or anchor < 0):
            raise InvalidJob("schedule.anchorMs: must be a non-negative integer (Unix milliseconds)")
        return EverySchedule(every, anchor)
    if kind == "at":
        _only(data, "kind", "at")
        return AtSchedule(_text(data, "at"))
    if isinstance(kind, str) and kind:
        raise InvalidJob(
            f"schedule.kind: {kind!r} is not supported by this gateway ({', '.join(SUPPORTED_KINDS)})"
        )
    raise InvalidJob(f"schedule.kind: must be one of {', '.join(SUPPORTED_KINDS)}")


def _zone(name: str | None) -> tzinfo:
    if name is None or name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidJob(
            f"schedule.tz: unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)"
        ) from None


def _parse_instant(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidJob(f"schedule.at: not an ISO 8601 date and time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _ms(moment)


def _local(ms: int, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, zone)


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"schedule.{key}: must be a non-empty string")
    return value.strip()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _only(data: Mapping[str, Any], *keys: str) -> None:
    extra = sorted(set(data) - set(keys))
    if extra:
        raise InvalidJob(f"schedule.{extra[0]}: not a field of a {data.get('kind')} schedule")
