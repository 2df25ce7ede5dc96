"""gatewayd's listening socket: every connection it accepts has Nagle's algorithm off.

With Nagle on, a small frame written while the previous one is still unacknowledged waits for
the client's delayed ACK (40 ms on Linux): the first events of a run, written just after the
`chat.send` response, reached the client 40 ms late. asyncio turns Nagle off on the sockets it
accepts only when the listening socket names TCP as its protocol.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.cli.gatewayd import listening_socket


async def _accepted_nodelay(host: str) -> int:
    sock = listening_socket(host, 0)
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted_sock = writer.get_extra_info("socket")
        seen.set_result(accepted_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=sock)
    try:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection(host, port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_connections_accepted_on_ipv4_have_nagle_off() -> None:
    assert await _accepted_nodelay("127.0.0.1") != 0


async def test_connections_accepted_on_ipv6_have_nagle_off() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    assert await _accepted_nodelay("::1") != 0
