"""The sans-I/O parts of webhooks: templates, signature checks, the rate limit, loading hooks."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from gateway.automation.errors import Refused
from gateway.automation.rate_limit import TokenBucket
from gateway.automation.templates import MAX_VALUE_CHARS, check, render, render_key
from gateway.automation.webhook_auth import Credentials, sign, verify
from gateway.automation.webhooks import load_hooks
from gateway.config import load_config
from gateway.errors import ConfigError

BODY = {
    "repository": {"name": "gateway", "owner": "acme"},
    "commits": [{"id": "abc123", "message": "fix"}],
    "failed": True,
}


def test_templates_insert_fields_of_the_body_and_nothing_else() -> None:
    template = (
        "{{ repository.name }} by {{repository.owner}}: {{ commits.0.id }} failed={{ failed }} [{{ nope.x }}]"
    )
    assert render(template, BODY) == "gateway by acme: abc123 failed=true []"
    assert json.loads(render("{{ body }}", BODY)) == BODY
    assert render("{{ commits }}", BODY) == '[{"id":"abc123","message":"fix"}]'
    # A value that looks like a placeholder is inserted as text, never expanded.
    assert render("{{ title }}", {"title": "{{ body }}"}) == "{{ body }}"
    assert len(render("{{ big }}", {"big": "x" * 10 * MAX_VALUE_CHARS})) == MAX_VALUE_CHARS


def test_a_malformed_template_is_refused() -> None:
    check("CI failed: {{ url }}")
    for bad in ("{{ url", "url }}", "{{ a b }}", "   "):
        with pytest.raises(ValueError):
            check(bad)


def test_session_key_templates_keep_only_what_a_key_may_hold() -> None:
    body = {"repository": {"name": "Acme/Web App!"}}
    assert render_key("agent:main:ci:{{ repository.name }}", body) == "agent:main:ci:acme-web-app"
    assert render_key("agent:main:ci:{{ missing }}", body) == "agent:main:ci:none"


def test_a_signature_over_timestamp_and_body_verifies_and_anything_else_is_refused() -> None:
    secret, body, now = "s3cret", b'{"a":1}', 1_800_000_000
    signature = sign(secret, now, body)
    expected = hmac.new(secret.encode(), f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    assert signature == f"sha256={expected}"
    creds = Credentials(secret=secret)
    headers = {"x-gateway-signature": signature, "x-gateway-timestamp": str(now)}
    proof = verify(creds, headers, body, now_s=now + 10, window_s=300)
    assert (proof.method, proof.signature) == ("signature", expected)

    def refused(headers: dict[str, str], body: bytes = body, now_s: float = now) -> str:
        with pytest.raises(Refused) as caught:
            verify(creds, headers, body, now_s=now_s, window_s=300)
        assert caught.value.status == 401
        return caught.value.reason

    assert "does not match" in refused(headers, b'{"a":2}')  # body changed
    assert "does not match" in refused({**headers, "x-gateway-timestamp": str(now + 1)})  # timestamp changed
    assert "does not match" in refused({**headers, "x-gateway-signature": sign("other", now, body)})
    assert "replay window" in refused(headers, now_s=now + 301)  # stale
    assert "replay window" in refused(headers, now_s=now - 301)  # from the future
    assert "X-Gateway-Timestamp" in refused({"x-gateway-signature": signature})
    assert "needs an X-Gateway-Signature" in refused({})


def test_a_bearer_token_proves_the_sender_when_configured() -> None:
    creds = Credentials(token="tok")
    assert verify(creds, {"authorization": "Bearer tok"}, b"{}", now_s=0, window_s=1).method == "token"
    for header in ("Bearer nope", "Basic tok", "tok"):
        with pytest.raises(Refused, match="bearer token does not match"):
            verify(creds, {"authorization": header}, b"{}", now_s=0, window_s=1)
    with pytest.raises(Refused, match="needs a bearer token"):
        verify(creds, {"x-gateway-signature": "sha256=00"}, b"{}", now_s=0, window_s=1)


def test_the_rate_limit_allows_a_burst_then_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate_per_s=1.0, burst=2, clock=lambda: now[0])
    assert bucket.take() is None and bucket.take() is None
    wait = bucket.take()
    assert wait is not None and 0.9 < wait <= 1.0
    now[0] += 1.0
    assert bucket.take() is None
    assert bucket.take() is not None


def test_hooks_load_their_secrets_from_the_environment_and_name_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        """
[webhooks.ci]
secret_env = "CI_SECRET"
template = "CI: {{ url }}"
session_key = "agent:main:ci"
deliver = { channel = "slack", to = "channel:C1" }

[webhooks.deploys]
token_env = "DEPLOY_TOKEN"
template = "deployed {{ version"
agent = "ghost"
"""
    )
    config = load_config(path, env={})
    with pytest.raises(ConfigError) as caught:
        load_hooks(config, {})
    text = str(caught.value)
    assert (
        f"config error in {path}: webhooks.ci.secret_env: environment variable CI_SECRET is not set" in text
    )
    assert "webhooks.deploys.template: not a placeholder" in text
    assert "webhooks.deploys.agent: unknown agent 'ghost'" in text
    path.write_text(path.read_text().replace("{{ version", "{{ version }}").replace('"ghost"', '"main"'))
    hooks = load_hooks(load_config(path, env={}), {"CI_SECRET": "s", "DEPLOY_TOKEN": "t"})
    assert hooks["ci"].credentials == Credentials(secret="s")
    assert hooks["ci"].delivery is not None and hooks["ci"].delivery.to == "C1"
    assert hooks["deploys"].credentials == Credentials(token="t")


def test_a_hook_without_any_secret_or_with_a_bad_name_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[webhooks.ci]\ntemplate = "x"\n')
    with pytest.raises(ConfigError, match="needs secret_env"):
        load_config(path, env={})
    path.write_text('[webhooks."Bad Name"]\ntemplate = "x"\nsecret_env = "S"\n')
    with pytest.raises(ConfigError, match="webhooks"):
        load_config(path, env={})
