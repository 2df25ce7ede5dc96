"""`Metrics`: the counters and histograms the daemon keeps, and how run observations feed them.

What a run does reaches them through `observe` (observations of `gateway.telemetry.timeline`,
made from the committed session events); the journal, the providers' HTTP requests and the chat
bindings report through the callbacks `journal_committed`, `provider_request` and
`channel_message`. Gauges and the counters other objects already keep are read on scrape
(`gateway.telemetry.readings`). `docs/operations.md` lists every family.

Labels never name a session, a key or a user: only reasons, providers, models, tools, statuses
and channels, with model and tool names capped (`LabelCap`): MCP servers and Python extensions add
tools at will, so past the cap a new tool is counted as `other`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.telemetry.instruments import SIZE_BUCKETS, Counter, Histogram, LabelCap
from gateway.telemetry.timeline import FirstToken, ModelCall, Observation, RunBegan, RunEnded, ToolCall

if TYPE_CHECKING:
    from agent_core.providers import RequestOutcome

MAX_MODELS = 64
"""Distinct provider/model pairs counted by name; more are `other`."""
MAX_TOOLS = 64
"""Distinct tool names counted by name besides the built-in ones; more are `other`."""
KNOWN_TOOLS = (
    "read",
    "write",
    "edit",
    "bash",
    "grep",
    "find",
    "ls",
    "session_branch",
    "session_spawn",
    "agent_interrupt",
    "gateway_reload",
)


class Metrics:
    """The daemon's counters and histograms (plain numbers until a scrape renders them)."""

    def __init__(self, *, max_models: int = MAX_MODELS, max_tools: int = MAX_TOOLS) -> None:
        self._models = LabelCap(max_models)
        self._tools = LabelCap(max_tools, fixed=KNOWN_TOOLS)
        self.runs_started = Counter("gateway_runs_started", "Runs started.")
        self.runs_finished = Counter(
            "gateway_runs_finished", "Runs finished, by termination reason.", ("reason",)
        )
        self.run_duration = Histogram(
            "gateway_run_duration_seconds", "Run duration, by termination reason.", ("reason",)
        )
        self.first_token = Histogram(
            "gateway_run_first_token_seconds", "Time from a run's start to its first streamed token."
        )
        model = ("provider", "model")
        self.model_calls = Counter(
            "gateway_model_calls", "Model calls, by stop reason.", (*model, "stop_reason")
        )
        self.model_call_duration = Histogram(
            "gateway_model_call_duration_seconds", "Model call duration, request to last token.", model
        )
        self.tokens = Counter("gateway_model_tokens", "Tokens used, by kind.", (*model, "kind"))
        self.cost = Counter(
            "gateway_model_cost_usd", "Cost of model calls in US dollars (catalogue prices).", model
        )
        self.tool_calls = Counter("gateway_tool_calls", "Tool calls, by outcome.", ("tool", "outcome"))
        self.tool_duration = Histogram("gateway_tool_call_duration_seconds", "Tool call duration.", ("tool",))
        http = (*model, "status")
        self.provider_requests = Counter(
            "gateway_provider_requests", "HTTP requests to model providers, by status.", http
        )
        self.provider_retries = Counter(
            "gateway_provider_retries", "Provider requests retried, by the status that caused it.", http
        )
        self.provider_errors = Counter(
            "gateway_provider_errors", "Provider requests that failed for good, by status.", http
        )
        self.journal_commit = Histogram("gateway_journal_commit_seconds", "Journal commit latency.")
        self.journal_batch = Histogram(
            "gateway_journal_commit_items", "Session items per journal commit.", buckets=SIZE_BUCKETS
        )
        self.channel_messages = Counter(
            "gateway_channel_messages", "Chat channel messages, in and out.", ("channel", "direction")
        )

    def counters(self) -> list[Counter]:
        return [value for value in vars(self).values() if isinstance(value, Counter)]

    def histograms(self) -> list[Histogram]:
        return [value for value in vars(self).values() if isinstance(value, Histogram)]

    # --- feeds --------------------------------------------------------------------------------

    def observe(self, observation: Observation) -> None:
        """Count one run observation."""
        if isinstance(observation, RunBegan):
            self.runs_started.inc()
        elif isinstance(observation, FirstToken):
            self.first_token.observe(observation.seconds)
        elif isinstance(observation, ModelCall):
            self._model_call(observation)
        elif isinstance(observation, ToolCall):
            tool = self._tools(observation.tool_name)
            self.tool_calls.inc(tool, "error" if observation.is_error else "ok")
            self.tool_duration.observe(_seconds(observation.start_ms, observation.end_ms), tool)
        elif isinstance(observation, RunEnded):
            self.runs_finished.inc(observation.reason)
            self.run_duration.observe(_seconds(observation.start_ms, observation.end_ms), observation.reason)

    def _model_call(self, call: ModelCall) -> None:
        provider, model = self._model(call.provider, call.model)
        self.model_calls.inc(provider, model, call.stop_reason)
        self.model_call_duration.observe(_seconds(call.start_ms, call.end_ms), provider, model)
        for kind, tokens in (
            ("input", call.input_tokens),
            ("output", call.output_tokens),
            ("cache_read", call.cache_read_tokens),
            ("cache_write", call.cache_write_tokens),
        ):
            self.tokens.inc(provider, model, kind, amount=tokens)
        self.cost.inc(provider, model, amount=call.cost_usd)

    def _model(self, provider: str, model: str) -> tuple[str, str]:
        if self._models(f"{provider}/{model}") == "other":
            return "other", "other"
        return provider, model

    def journal_committed(self, seconds: float, items: int) -> None:
        """One journal commit of `items` session items took `seconds`."""
        self.journal_commit.observe(seconds)
        self.journal_batch.observe(items)

    def provider_request(self, outcome: RequestOutcome) -> None:
        """One HTTP attempt to a provider ended (`agent_core.providers` observers)."""
        provider, model = self._model(outcome.provider, outcome.model)
        self.provider_requests.inc(provider, model, outcome.status)
        if outcome.retrying:
            self.provider_retries.inc(provider, model, outcome.status)
        elif outcome.final:
            self.provider_errors.inc(provider, model, outcome.status)

    def channel_message(self, channel: str, direction: str) -> None:
        """A chat message came in (`in`) or a reply chunk went out (`out`) on `channel`."""
        self.channel_messages.inc(channel, direction)


def _seconds(start_ms: int, end_ms: int) -> float:
    return max(0, end_ms - start_ms) / 1000
