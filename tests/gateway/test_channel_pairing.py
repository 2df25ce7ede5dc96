"""`gateway.channel_pairing`: an approval is durable whatever happens to the courtesy message that
tells the sender, and that message runs in a task the pairing object ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from bindings import PairingRequest, ReplyRoute
from gateway.channel_pairing import Announcer, Pairing
from gateway.channel_store import ChannelStore
from sessions.store import Store
from tests.sessions.conftest import store, store_url

__all__ = ["store", "store_url"]

ROUTE = ReplyRoute(platform="discord", account_id="default", channel_id="dm-1")


class Binding:
    """Tells senders about approvals; `fail` makes it raise, `hold` makes it wait until cancelled."""

    def __init__(self, *, fail: bool = False, hold: bool = False) -> None:
        self.binding_id = "discord:default"
        self.fail = fail
        self.hold = hold
        self.told: list[str] = []
        self.called = asyncio.Event()
        self.cancelled = False

    async def announce_approval(self, request: PairingRequest) -> bool:
        self.called.set()
        if self.fail:
            raise RuntimeError("the platform is down")
        if self.hold:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        self.told.append(request.sender_id)
        return True


@pytest.fixture
def channels(store: Store) -> ChannelStore:
    return ChannelStore(store.database)


async def _request(channels: ChannelStore) -> PairingRequest:
    request = await channels.pairing_request("discord", "default", "u1", "ada", ROUTE)
    assert request is not None
    return request


def found(binding: Binding) -> Callable[[str], Announcer | None]:
    """The lookup `Channels` gives: the binding of the request's account."""
    return lambda binding_id: binding if binding_id == binding.binding_id else None


async def test_an_approval_is_listed_stored_and_told_to_the_sender(channels: ChannelStore) -> None:
    binding = Binding()
    pairing = Pairing(channels, found(binding))
    request = await _request(channels)
    assert [row["senderId"] for row in await pairing.requests()] == ["u1"]

    row = await pairing.approve(request.code, channel="discord", account_id="default")

    assert row is not None and row["approved"] and row["senderName"] == "ada"
    assert await channels.pairing_is_approved("discord", "default", "u1")
    await asyncio.wait_for(binding.called.wait(), 5)
    await pairing.aclose()
    assert binding.told == ["u1"]
    assert await pairing.approve("no-such-code") is None


async def test_a_failed_announcement_leaves_the_approval_standing(channels: ChannelStore) -> None:
    binding = Binding(fail=True)
    pairing = Pairing(channels, found(binding))
    request = await _request(channels)

    row = await pairing.approve(request.code)

    assert row is not None and row["approved"]
    await asyncio.wait_for(binding.called.wait(), 5)
    await pairing.aclose()
    assert await channels.pairing_is_approved("discord", "default", "u1")


async def test_closing_cancels_an_announcement_still_running(channels: ChannelStore) -> None:
    binding = Binding(hold=True)
    pairing = Pairing(channels, found(binding))
    request = await _request(channels)
    await pairing.approve(request.code)
    await asyncio.wait_for(binding.called.wait(), 5)

    await pairing.aclose()

    assert binding.cancelled and binding.told == []
    await pairing.aclose()


async def test_without_a_binding_to_tell_the_approval_still_happens(channels: ChannelStore) -> None:
    pairing = Pairing(channels, lambda binding_id: None)
    request = await _request(channels)

    row = await pairing.approve(request.code)

    assert row is not None and row["approved"]
    assert await channels.pairing_is_approved("discord", "default", "u1")
