"""Trust states over a real SQLite store: new extensions are pending, operators move them, every
change is stored with who made it, and a changed origin sends an extension back to pending."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.extensions.errors import TrustTransitionError, UnknownExtensionError
from gateway.extensions.trust import GATEWAY_ACTOR, TrustState, TrustStore, check_transition
from sessions import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store.open(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}") as opened:
        yield opened


@pytest.fixture
def trust(store: Store) -> TrustStore:
    clock = iter(range(1000, 10_000, 10))
    return TrustStore(store.database, clock=lambda: next(clock))


async def test_a_new_extension_is_pending_until_an_operator_enables_it(trust: TrustStore) -> None:
    record = await trust.discovered("hello", "entry point hello = hello:register (hello)")
    assert record.state == TrustState.PENDING and record.changed_by == GATEWAY_ACTOR
    assert await trust.discovered("hello", record.origin) == record  # seen again: nothing changes
    enabled, changed = await trust.change(
        "hello", TrustState.ENABLED, "token ops (gatewayctl from 127.0.0.1)"
    )
    assert changed and enabled.state == TrustState.ENABLED and enabled.changed_by.startswith("token ops")
    again, changed = await trust.change("hello", TrustState.ENABLED, "someone else")
    assert not changed and again == enabled
    disabled, _ = await trust.change("hello", TrustState.DISABLED, "root credential")
    assert (await trust.all())["hello"] == disabled
    assert await trust.history("hello") == [
        (None, "pending", GATEWAY_ACTOR, record.changed_at),
        ("pending", "enabled", "token ops (gatewayctl from 127.0.0.1)", enabled.changed_at),
        ("enabled", "disabled", "root credential", disabled.changed_at),
    ]


async def test_another_origin_under_an_approved_name_goes_back_to_pending(trust: TrustStore) -> None:
    await trust.discovered("hello", "file /home/a/hello.py")
    await trust.change("hello", TrustState.ENABLED, "root credential")
    moved = await trust.discovered("hello", "entry point hello = evil:register (evil)")
    assert moved.state == TrustState.PENDING and moved.origin == "entry point hello = evil:register (evil)"
    assert (await trust.history("hello"))[-1][:3] == ("enabled", "pending", GATEWAY_ACTOR)


async def test_refused_changes_name_what_was_expected(trust: TrustStore) -> None:
    with pytest.raises(UnknownExtensionError, match="no extension named 'ghost'"):
        await trust.change("ghost", TrustState.ENABLED, "root credential")
    await trust.discovered("hello", "file /x.py")
    with pytest.raises(TrustTransitionError, match="cannot be set to pending"):
        await trust.change("hello", TrustState.PENDING, "root credential")
    with pytest.raises(TrustTransitionError, match="is enabled; it can become pending only from"):
        check_transition("hello", TrustState.ENABLED, TrustState.PENDING)
