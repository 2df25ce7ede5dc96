"""The model a session's runs and compactions call, and the stream function that calls it.

The session's own model setting wins over its agent's profile. When neither names a model the
directory can resolve, runs still happen: they end at once with the directory's error (which
says how to configure a model), on a placeholder model that is never called.
"""

from __future__ import annotations

from agent_core import Model, StreamFn
from sessions.profiles import AgentDirectory, AgentProfile
from sessions.records import SessionRecord

__all__ = ["model_for", "stream_fn_or_default"]


def model_for(
    directory: AgentDirectory, session: SessionRecord, profile: AgentProfile
) -> tuple[Model, str | None]:
    """The session's model, and None; or a placeholder and the reason there is no usable one."""
    ref = session.model or profile.model
    try:
        # Without a ref the directory's error says how to configure a model (the same text the
        # daemon prints at start-up).
        return directory.resolve_model(ref or ""), None
    except Exception as exc:
        return _placeholder(ref), str(exc)


def stream_fn_or_default(stream_fn: StreamFn | None) -> StreamFn:
    """`stream_fn`, or the providers' own when None (imported only then)."""
    if stream_fn is not None:
        return stream_fn
    from agent_core.providers import stream_simple

    return stream_simple


def _placeholder(ref: str | None) -> Model:
    provider, _, model_id = (ref or "none/none").partition("/")
    return Model(id=model_id or "none", api="none", provider=provider or "none")
