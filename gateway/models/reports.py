"""What `models.list` and `usage.summary` report: the model catalogue with the keys each provider
has, and the tokens and cost of finished runs per agent and UTC day (from the runs' stored
results)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from agent_core import Model
from agent_core.models import list_models
from agent_core.providers import is_loopback_url
from gateway.directory import Directory
from gateway.models.routing import provider_keys

DAY_MS = 86_400_000


def model_rows(directory: Directory) -> list[dict[str, Any]]:
    """Every known model with its provider's settings applied: limits, prices (dollars per
    million tokens) and how many API keys its provider has (``keyless``: a local server that
    needs none)."""
    keys: dict[str, int] = {}
    rows = []
    for listed in list_models():
        try:
            model = directory.resolve_model(listed.ref)
        except Exception:
            model = listed
        if model.provider not in keys:
            keys[model.provider] = len(provider_keys(directory, model.provider))
        rows.append(_row(model, keys[model.provider]))
    return rows


def _row(model: Model, key_count: int) -> dict[str, Any]:
    keyless = model.provider == "faux" or bool(model.base_url and is_loopback_url(model.base_url))
    return {
        "id": model.id,
        "ref": model.ref,
        "name": model.name or model.id,
        "provider": model.provider,
        "api": model.api,
        "contextWindow": model.context_window,
        "maxTokens": model.max_tokens,
        "reasoning": model.reasoning,
        "input": list(model.input),
        "cost": model.cost.dump(),
        "keys": key_count,
        "keyless": keyless,
    }


def usage_rows(runs: Iterable[tuple[str, int, Any]], agent_id: str | None = None) -> list[dict[str, Any]]:
    """Runs' usage summed per agent and UTC day, newest day first, then by agent."""
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for agent, started_at, result in runs:
        if agent_id is not None and agent != agent_id:
            continue
        usage = result.get("usage") if isinstance(result, dict) else None
        if not isinstance(usage, dict):
            continue
        day = dt.datetime.fromtimestamp(started_at / 1000, dt.UTC).date().isoformat()
        row = totals.setdefault(
            (day, agent),
            {
                "day": day,
                "agentId": agent,
                "runs": 0,
                "input": 0,
                "output": 0,
                "cacheRead": 0,
                "cacheWrite": 0,
                "totalTokens": 0,
                "cost": 0.0,
            },
        )
        row["runs"] += 1
        for key in ("input", "output", "cacheRead", "cacheWrite", "totalTokens"):
            value = usage.get(key)
            row[key] += value if isinstance(value, int) else 0
        cost = usage.get("cost")
        row["cost"] += cost if isinstance(cost, int | float) else 0.0
    ordered = sorted(totals.values(), key=lambda r: r["agentId"])
    return sorted(ordered, key=lambda r: r["day"], reverse=True)
