"""The handler table agrees with the protocol's method table: every method has a handler that
takes the method's params model, and a handler given the wrong model refuses it."""

from __future__ import annotations

import typing

import pytest

from gateway.methods import HANDLERS
from gateway.methods.base import Route
from gateway.protocol import params as p
from gateway.protocol.methods import METHODS


def test_every_method_has_a_handler_for_its_params_model() -> None:
    assert set(HANDLERS) == set(METHODS)
    for name, route in HANDLERS.items():
        assert route.params is METHODS[name].params, name
        hints = typing.get_type_hints(route.handler)
        assert hints["params"] is route.params, f"{name}: the handler is annotated {hints['params']}"


async def test_a_route_refuses_params_of_another_model() -> None:
    async def handler(call: object, params: p.ChatSendParams) -> None:
        return None

    route = Route(p.ChatSendParams, handler)

    class FakeCall:
        method = "chat.send"

    with pytest.raises(TypeError, match="expects ChatSendParams"):
        await route(FakeCall(), p.EmptyParams())  # type: ignore[arg-type]
