"""The contexts kept in memory for live sessions (`sessions.context_cache`): always what a fresh
read of the store gives, so a run never starts from a context the transcript does not hold."""

from __future__ import annotations

from msgspec.structs import replace

from agent_core import AgentMessage, AssistantMessage, TextContent, UserMessage
from sessions._json import dumps
from sessions.context import build_context
from sessions.context_cache import ContextCache
from sessions.records import ContextEntry, NewEntry
from sessions.store import Store
from tests.sessions.manager_support import FAST, Harness, HarnessFactory, harnesses

__all__ = ["harnesses"]


async def _fresh(store: Store, session_id: str) -> list[AgentMessage]:
    return build_context(await store.transcript.context_entries(session_id))


async def _cached_equals_fresh(h: Harness, session_id: str) -> list[AgentMessage]:
    """The session's cached context (which must be there), checked against a fresh read of its
    context entries and of its whole transcript."""
    record = await h.manager.get(session_id=session_id)
    cached = h.manager.contexts.get(session_id, record.entry_count)
    assert cached is not None, "the session's context is not cached"
    assert cached == await _fresh(h.store, session_id)
    assert cached == build_context(await h.store.transcript.read(session_id))
    return cached


async def _run(h: Harness, session_id: str, text: str, key: str) -> None:
    session = await h.manager.get(session_id=session_id)
    await h.send(session, text, key)
    outcome = await h.wait(key)
    assert outcome["status"] == "ok", outcome


def _user(text: str) -> NewEntry:
    return NewEntry(kind="message", payload=UserMessage(content=[TextContent(text=text)]).dump())


async def test_the_cached_context_is_a_fresh_read_after_runs_injects_and_compactions(
    harnesses: HarnessFactory,
) -> None:
    h = await harnesses(settings=replace(FAST, compaction_keep_recent_tokens=5))
    session = await h.session("agent:main:cache")
    for n in range(3):
        await _run(h, session.id, f"question {n}", f"cache-{n}")
        await _cached_equals_fresh(h, session.id)
    assert len(await _cached_equals_fresh(h, session.id)) == 6

    await h.manager.inject(session.id, text="a note from outside the run", role="assistant")
    assert (await _cached_equals_fresh(h, session.id))[-1].role == "assistant"

    result = await h.manager.compact(session.id)
    after = await _cached_equals_fresh(h, session.id)
    assert getattr(after[0], "summary", None) == result.summary
    assert len(after) < 8

    await _run(h, session.id, "after the compaction", "cache-after")
    await _cached_equals_fresh(h, session.id)


async def test_branches_and_resets_have_their_own_contexts(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session("agent:main:tree")
    await _run(h, session.id, "first", "tree-1")
    await _run(h, session.id, "second", "tree-2")
    entries = await h.store.transcript.read(session.id)
    branch = await h.store.tree.branch(session.id, at_entry_id=entries[1].id, key="agent:main:tree-b")
    await _run(h, branch.id, "on the branch", "tree-b1")
    on_branch = await _cached_equals_fresh(h, branch.id)
    assert [m.role for m in on_branch] == ["user", "assistant", "user", "assistant"]

    await _run(h, session.id, "third", "tree-3")
    assert len(await _cached_equals_fresh(h, session.id)) == 6
    assert await _cached_equals_fresh(h, branch.id) == on_branch

    fresh = await h.store.tree.reset("agent:main:tree")
    h.manager.forget(session.id)
    await _run(h, fresh.id, "after the reset", "tree-r1")
    assert len(await _cached_equals_fresh(h, fresh.id)) == 2


async def test_entries_written_around_the_journal_are_read_again(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session("agent:main:around")
    await _run(h, session.id, "first", "around-1")
    await h.store.transcript.append(session.id, [_user("written by hand")])
    record = await h.manager.get(session_id=session.id)
    assert h.manager.contexts.get(session.id, record.entry_count) is None

    await _run(h, session.id, "second", "around-2")
    texts = [getattr(m, "content", [None])[0] for m in await _cached_equals_fresh(h, session.id)]
    assert TextContent(text="written by hand") in texts


def _entries(count: int, chars: int, prefix: str = "m") -> list[ContextEntry]:
    out = []
    for n in range(count):
        message = AssistantMessage(
            content=[TextContent(text="x" * chars)], api="faux", provider="faux", model="echo"
        )
        out.append(ContextEntry(f"{prefix}{n}", "message", _json(message)))
    return out


def _json(message: AgentMessage) -> str:
    return dumps(message.dump())


def _look_up(cache: ContextCache, session_id: str, count: int = 10) -> bool:
    """What a run does: look the context up, read it on a miss. True on a hit."""
    if cache.get(session_id, count) is not None:
        return True
    cache.fill(session_id, count, _entries(count, 100))
    return False


def test_contexts_stay_within_the_budget_least_recently_used_first() -> None:
    one = sum(len(e.payload) for e in _entries(10, 100)) * 2
    cache = ContextCache(lambda: one * 2)
    _look_up(cache, "a")
    _look_up(cache, "b")
    assert cache.size == one * 2
    assert cache.get("a", 10) is not None  # a is now the most recently used, and used twice
    _look_up(cache, "c")
    _look_up(cache, "c")  # c, used as often as a, takes b's place
    assert cache.get("b", 10) is None
    assert cache.get("a", 10) is not None and cache.get("c", 10) is not None
    assert cache.size <= one * 2

    cache.fill("huge", 100, _entries(100, 100))  # larger than the whole budget: not kept
    assert cache.get("huge", 100) is None
    cache.drop("a")
    cache.drop("c")
    assert len(cache) == 0 and cache.size == 0


def test_a_stale_count_or_an_unknown_first_kept_entry_drops_the_context() -> None:
    cache = ContextCache(lambda: 1 << 20)
    cache.fill("s", 3, _entries(3, 10))
    assert cache.get("s", 4) is None  # an entry the cache never saw
    cache.fill("s", 3, _entries(3, 10))
    cache.committed("s", [NewEntry(kind="compaction", payload={"summary": "s", "firstKeptEntryId": "x"})])
    assert cache.get("s", 4) is None

    kept = _entries(3, 10)
    cache.fill("s", 3, kept)
    payload = {"summary": "short", "firstKeptEntryId": "m2", "tokensBefore": 9}
    cache.committed("s", [NewEntry(kind="compaction", payload=payload, id="c1")])
    compacted = cache.get("s", 4)
    assert compacted is not None
    entries = [*kept, ContextEntry("c1", "compaction", dumps(payload))]
    assert compacted == build_context(entries) and len(compacted) == 2


def test_sessions_taking_turns_keep_what_fits_instead_of_evicting_each_other() -> None:
    """Six sessions run in turn with room for three contexts: plain LRU would evict each one just
    before its next run (no hit at all); the three kept stay kept."""
    one = sum(len(e.payload) for e in _entries(10, 100)) * 2
    cache = ContextCache(lambda: one * 3)
    sessions = [f"s{n}" for n in range(6)]
    hits = [sum(_look_up(cache, s) for s in sessions) for _ in range(10)]
    assert hits[0] == 0 and all(h == 3 for h in hits[1:]), hits
    assert cache.size <= one * 3

    # A session used more often than the kept ones takes the place of the least recently used.
    for _ in range(20):
        _look_up(cache, "hot")
    assert cache.get("hot", 10) is not None and cache.size <= one * 3


def test_use_counts_age_so_that_old_habits_fade() -> None:
    """Counts are halved every few uses: a session busy long ago loses to one busy now."""
    one = sum(len(e.payload) for e in _entries(10, 100)) * 2
    cache = ContextCache(lambda: one)
    for _ in range(400):
        _look_up(cache, "old")
    for n in range(6_000):
        _look_up(cache, f"passer-{n}")  # one look-up each: never enough to take old's place
    assert cache.get("old", 10) is not None
    for _ in range(10):
        _look_up(cache, "new")
    assert cache.get("new", 10) is not None, "the old count should have faded"
