from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.protocol import params as p
from gateway.protocol.frames import response_from_error
from gateway.protocol.methods import (
    EVENTS,
    METHOD_NAMES,
    METHODS,
    InvalidParams,
    Scope,
    expand_scopes,
    missing_scope_error,
    required_scope,
    scope_allows,
    validate_params,
)
from tests.gateway.protocol._captures import exchanges, records

READ, WRITE, ADMIN = "operator.read", "operator.write", "operator.admin"

# The scope of every method, as PROTOCOL.md lists it.
PROTOCOL_SCOPES = {
    "health": READ,
    "status": READ,
    "system-presence": READ,
    "agents.list": READ,
    "models.list": READ,
    "commands.list": READ,
    "config.get": READ,
    "sessions.list": READ,
    "sessions.describe": READ,
    "sessions.subscribe": READ,
    "sessions.unsubscribe": READ,
    "sessions.messages.subscribe": READ,
    "sessions.messages.unsubscribe": READ,
    "sessions.create": WRITE,
    "sessions.send": WRITE,
    "sessions.patch": WRITE,
    "sessions.reset": ADMIN,
    "sessions.delete": ADMIN,
    "sessions.compact": ADMIN,
    "sessions.fork": WRITE,
    "sessions.abort": WRITE,
    "chat.send": WRITE,
    "chat.history": READ,
    "chat.abort": WRITE,
    "chat.inject": ADMIN,
    "agent": WRITE,
    "agent.wait": WRITE,
    "sessions.tree": READ,
    "sessions.branch": WRITE,
    "sessions.switch": WRITE,
    "sessions.events.subscribe": READ,
    "sessions.events.unsubscribe": READ,
    "channels.status": READ,
    "config.reload": ADMIN,
    "pairing.list": ADMIN,
    "pairing.approve": ADMIN,
}


def model(result: BaseModel | InvalidParams) -> Any:
    assert not isinstance(result, InvalidParams), result
    return result


def message(result: BaseModel | InvalidParams) -> str:
    assert isinstance(result, InvalidParams), result
    return result.message


def test_every_protocol_method_has_its_documented_scope() -> None:
    for method, scope in PROTOCOL_SCOPES.items():
        assert method in METHODS, method
        assert required_scope(method) == scope, method


def test_every_method_has_a_scope_and_a_params_model() -> None:
    assert len(METHOD_NAMES) == len(set(METHOD_NAMES)) == len(METHODS)
    for name, spec in METHODS.items():
        assert spec.name == name
        assert isinstance(spec.scope, Scope)
        assert issubclass(spec.params, BaseModel)
    assert len(EVENTS) == len(set(EVENTS))
    assert {"connect.challenge", "tick", "agent", "chat", "session.message.delta", "session.snapshot"} <= set(
        EVENTS
    )


def test_every_method_real_clients_called_exists_and_their_params_validate() -> None:
    called = set()
    for record in records("captured_requests.jsonl"):
        frame = record["frame"]
        called.add(frame["method"])
        model(validate_params(frame["method"], frame.get("params")))
    assert called <= set(METHODS)
    # What the real CLI capture calls, plus what the TUI calls on start.
    assert {
        "health",
        "sessions.list",
        "chat.send",
        "chat.history",
        "question.list",
        "plugin.approval.list",
    } <= called


def test_scope_implication() -> None:
    assert scope_allows({ADMIN}, "health")
    assert scope_allows({ADMIN}, "chat.send")
    assert scope_allows({ADMIN}, "sessions.reset")
    assert scope_allows({ADMIN}, "plugin.approval.list")
    assert scope_allows({WRITE}, "chat.send")
    assert scope_allows({WRITE}, "chat.history")
    assert not scope_allows({WRITE}, "sessions.reset")
    assert scope_allows({READ}, "sessions.list")
    assert not scope_allows({READ}, "chat.send")
    assert not scope_allows(set(), "health")
    assert scope_allows({"operator.approvals"}, "plugin.approval.list")
    assert not scope_allows({"operator.approvals"}, "health")
    assert not scope_allows({ADMIN}, "no.such.method")
    assert expand_scopes({WRITE}) == {WRITE, READ}
    assert expand_scopes({ADMIN}) >= {
        READ,
        WRITE,
        ADMIN,
        "operator.approvals",
        "operator.questions",
        "operator.pairing",
    }


def test_missing_scope_errors_are_exactly_openclaws() -> None:
    forbidden = [
        (req, res)
        for req, res, _ in exchanges("captured_method_errors.jsonl")
        if res and res["error"]["code"] == "FORBIDDEN"
    ]
    assert len(forbidden) == 3
    for request, response in forbidden:
        assert not scope_allows(set(), request["method"])
        frame = response_from_error(request["id"], missing_scope_error(request["method"]))
        assert json.loads(frame) == response


def test_invalid_params_answer_matches_the_captured_one() -> None:
    request, response, _ = next(
        e
        for e in exchanges("captured_method_errors.jsonl")
        if e[1] and e[1]["error"]["message"].startswith("invalid ")
    )
    result = validate_params(request["method"], request["params"])
    assert message(result) == response["error"]["message"]
    assert isinstance(result, InvalidParams)
    frame = response_from_error(request["id"], result.to_error())
    assert json.loads(frame) == response


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        (
            "chat.send",
            {"sessionKey": "k", "message": "m"},
            "invalid chat.send params: must have required property 'idempotencyKey'",
        ),
        (
            "chat.send",
            {"sessionKey": "", "message": "m", "idempotencyKey": "i"},
            "invalid chat.send params: at /sessionKey: must NOT have fewer than 1 characters",
        ),
        (
            "chat.send",
            {"sessionKey": "k" * 513, "message": "m", "idempotencyKey": "i"},
            "invalid chat.send params: at /sessionKey: must NOT have more than 512 characters",
        ),
        (
            "chat.send",
            {"sessionKey": "k", "message": 5, "idempotencyKey": "i"},
            "invalid chat.send params: at /message: must be string",
        ),
        (
            "chat.send",
            {"sessionKey": "k", "message": "m", "idempotencyKey": "i", "queueMode": "later"},
            "invalid chat.send params: at /queueMode: must be equal to one of the allowed values: "
            "'steer', 'followup', 'collect' or 'interrupt'",
        ),
        (
            "chat.send",
            {"sessionKey": "k", "message": "m", "idempotencyKey": "i", "attachments": [1]},
            "invalid chat.send params: at /attachments/0: must be object",
        ),
        (
            "chat.history",
            {"sessionKey": "k", "limit": 0},
            "invalid chat.history params: at /limit: must be >= 1",
        ),
        (
            "chat.history",
            {"sessionKey": "k", "limit": 1001},
            "invalid chat.history params: at /limit: must be <= 1000",
        ),
        (
            "chat.history",
            {"sessionKey": "k", "limit": "5"},
            "invalid chat.history params: at /limit: must be integer",
        ),
        (
            "chat.history",
            {"sessionKey": "k", "limit": 5.5},
            "invalid chat.history params: at /limit: must be integer",
        ),
        (
            "sessions.list",
            {"archived": "some"},
            'invalid sessions.list params: at /archived: must be boolean or "all"',
        ),
        (
            "sessions.patch",
            {"key": "k", "pinned": 1},
            "invalid sessions.patch params: at /pinned: must be boolean",
        ),
        ("agent.wait", {}, "invalid agent.wait params: must have required property 'runId'"),
        ("health", [], "invalid health params: must be object"),
        (
            "sessions.tree",
            {},
            "invalid sessions.tree params: must have required property 'key' or 'sessionId'",
        ),
        (
            "sessions.tree",
            {"key": "k", "depth": 2},
            "invalid sessions.tree params: must NOT have additional property 'depth'",
        ),
        (
            "sessions.events.subscribe",
            {"key": "k", "afterSeq": -1},
            "invalid sessions.events.subscribe params: at /afterSeq: must be >= 0",
        ),
        (
            "sessions.switch",
            {"key": "k"},
            "invalid sessions.switch params: must have required property 'sessionId'",
        ),
        (
            "config.reload",
            {"force": True},
            "invalid config.reload params: must NOT have additional property 'force'",
        ),
    ],
)
def test_params_error_texts(method: str, params: Any, expected: str) -> None:
    assert message(validate_params(method, params)) == expected


def test_valid_params_become_typed_models() -> None:
    sent = model(
        validate_params(
            "chat.send",
            {
                "sessionKey": "agent:main:main",
                "message": "hi",
                "idempotencyKey": "k1",
                "queueMode": "interrupt",
                "deliver": False,
            },
        )
    )
    assert isinstance(sent, p.ChatSendParams)
    assert (sent.session_key, sent.message, sent.idempotency_key, sent.queue_mode) == (
        "agent:main:main",
        "hi",
        "k1",
        "interrupt",
    )
    assert isinstance(model(validate_params("health", None)), p.EmptyParams)
    sub = model(validate_params("sessions.events.subscribe", {"sessionId": "s1", "afterSeq": 0}))
    assert (sub.key, sub.session_id, sub.after_seq) == (None, "s1", 0)
    assert model(validate_params("sessions.list", {"archived": "all"})).archived == "all"


def test_compatibility_params_keep_fields_of_newer_clients() -> None:
    sent = model(
        validate_params(
            "chat.send",
            {
                "sessionKey": "k",
                "message": "m",
                "idempotencyKey": "i",
                "originatingChannel": "x",
                "fastMode": "auto",
            },
        )
    )
    assert sent.model_extra == {"originatingChannel": "x", "fastMode": "auto"}


def test_patch_tells_absent_from_null() -> None:
    cleared = model(validate_params("sessions.patch", {"key": "k", "label": None}))
    untouched = model(validate_params("sessions.patch", {"key": "k", "model": "openai/gpt-4.1"}))
    assert "label" in cleared.model_fields_set and cleared.label is None
    assert "label" not in untouched.model_fields_set


def test_fork_is_branch_under_openclaws_names() -> None:
    fork = model(
        validate_params("sessions.fork", {"sessionKey": "agent:main:main", "entryId": "e7", "label": "try"})
    )
    branch = fork.as_branch()
    assert isinstance(branch, p.SessionsBranchParams)
    assert (branch.key, branch.from_entry_id, branch.label, branch.new_key) == (
        "agent:main:main",
        "e7",
        "try",
        None,
    )
    assert message(validate_params("sessions.fork", {"sessionKey": "k"})) == (
        "invalid sessions.fork params: must have required property 'entryId'"
    )


def test_unknown_method_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        validate_params("no.such.method", {})
