"""The signed Interactions endpoint: Ed25519 verification for real, PING/PONG, commands."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bindings.config import DiscordAccountConfig
from bindings.discord import DiscordBinding
from bindings.discord.interactions import load_public_key, verify_interaction
from bindings.errors import BindingConfigError, SignatureError
from bindings.state import ConnectionState
from tests.bindings.helpers import wait_until
from tests.bindings.memory_host import MemoryHost
from tests.bindings.standins.discord import DiscordStandIn
from tests.bindings.standins.discord_interactions import InteractionsClient


def keypair() -> tuple[Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    return key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def test_verify_interaction() -> None:
    key, public_hex = keypair()
    public = load_public_key(public_hex)
    body = b'{"type":1}'
    signature = key.sign(b"1700000000" + body).hex()
    verify_interaction(public, signature, "1700000000", body)
    with pytest.raises(SignatureError):
        verify_interaction(public, signature, "1700000001", body)
    with pytest.raises(SignatureError):
        verify_interaction(public, signature, "1700000000", body + b" ")
    with pytest.raises(SignatureError):
        verify_interaction(public, keypair()[0].sign(b"1700000000" + body).hex(), "1700000000", body)
    with pytest.raises(SignatureError):
        verify_interaction(public, "zz", "1700000000", body)
    with pytest.raises(SignatureError):
        verify_interaction(public, None, "1700000000", body)
    with pytest.raises(SignatureError, match="window"):
        verify_interaction(public, signature, "1700000000", body, now=1700001000, max_age_s=300)
    with pytest.raises(BindingConfigError):
        load_public_key("abc")


@pytest.fixture
async def endpoint(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> AsyncIterator[tuple[DiscordBinding, InteractionsClient]]:
    signer = InteractionsClient(http, "unused")
    config = DiscordAccountConfig(api_base_url=discord.api_base_url, mode="interactions", group_policy="open")
    env = {"DISCORD_BOT_TOKEN": discord.token, "DISCORD_PUBLIC_KEY": signer.public_key_hex}
    async with DiscordBinding(config, host, http, env=env) as binding:
        transport = httpx.ASGITransport(app=binding.interactions_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            signed = InteractionsClient(client, "http://gateway/interactions")
            signed._key = signer._key
            yield binding, signed


async def test_ping_is_answered_with_pong(endpoint: tuple[DiscordBinding, InteractionsClient]) -> None:
    binding, client = endpoint
    await wait_until(lambda: binding.state is ConnectionState.READY)
    response = await client.ping()
    assert response.status_code == 200
    assert response.json() == {"type": 1}


async def test_forged_and_tampered_requests_are_refused(
    endpoint: tuple[DiscordBinding, InteractionsClient],
) -> None:
    _, client = endpoint
    assert (await client.ping(other_key=True)).status_code == 401
    assert (await client.ping(tamper=True)).status_code == 401


async def test_a_command_becomes_an_input(
    endpoint: tuple[DiscordBinding, InteractionsClient], host: MemoryHost, discord: DiscordStandIn
) -> None:
    _, client = endpoint
    discord.add_channel("500", guild_id="900")
    response = await client.command(
        "ask", [{"name": "prompt", "type": 3, "value": "what time is it?"}], channel_id="500", guild_id="900"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["type"] == 4 and body["data"]["flags"] == 64
    [inbound] = host.submitted
    assert inbound.text == "what time is it?"
    assert inbound.session_key == "agent:main:discord:channel:500"
    run_id = host.results[inbound.idempotency_key].run_id
    assert run_id is not None
    host.emit(inbound.session_key, run_id, "final", "It is noon.")
    await wait_until(lambda: discord.channel_texts("500") == ["It is noon."])


async def test_gateway_mode_has_no_interactions_endpoint(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    config = DiscordAccountConfig(api_base_url=discord.api_base_url)
    binding = DiscordBinding(config, host, http, env={"DISCORD_BOT_TOKEN": discord.token})
    with pytest.raises(BindingConfigError):
        binding.interactions_app()
    await binding.aclose()
