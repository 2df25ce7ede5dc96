"""The `connect` request's params: the one model every connection validates (the handshake,
`gateway.protocol.handshake`), kept apart from the methods' models, which are imported with the
first method call (`gateway.protocol.methods`).

The client's fields follow OpenClaw's `ConnectParams` (see `gateway.protocol.params` for the
conventions every params model follows).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from gateway.protocol.params_base import CompatParams, NonEmptyStr


class ClientInfo(CompatParams):
    # OpenClaw closes `id` and `mode` to fixed enums; the gateway's own clients (dashboard,
    # gatewayctl, bindings) name themselves, so any non-empty string is accepted.
    id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    version: NonEmptyStr
    platform: NonEmptyStr
    mode: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    display_name: NonEmptyStr | None = None
    build_id: Annotated[str, StringConstraints(min_length=1, max_length=96)] | None = None
    device_family: NonEmptyStr | None = None
    model_identifier: NonEmptyStr | None = None
    time_zone: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    instance_id: NonEmptyStr | None = None


class DeviceIdentity(CompatParams):
    id: NonEmptyStr
    public_key: NonEmptyStr
    signature: NonEmptyStr
    signed_at: Annotated[int, Field(ge=0)]
    nonce: str


class ConnectAuth(CompatParams):
    token: str | None = None
    password: str | None = None
    bootstrap_token: str | None = None
    device_token: str | None = None


class ConnectParams(CompatParams):
    min_protocol: Annotated[int, Field(ge=1)]
    max_protocol: Annotated[int, Field(ge=1)]
    client: ClientInfo
    caps: list[NonEmptyStr] = Field(default_factory=list)
    commands: list[NonEmptyStr] | None = None
    permissions: dict[str, bool] | None = None
    path_env: str | None = None
    role: NonEmptyStr | None = None
    scopes: list[NonEmptyStr] | None = None
    device: DeviceIdentity | None = None
    auth: ConnectAuth | None = None
    locale: str | None = None
    user_agent: str | None = None
