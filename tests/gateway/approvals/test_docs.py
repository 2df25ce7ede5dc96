"""docs/approvals.md: its configuration example is a valid config with the policy it describes."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.approvals import policy_for
from gateway.config import load_config
from gateway.sandbox import RiskTier

DOC = Path(__file__).resolve().parents[3] / "docs" / "approvals.md"


def test_the_policy_example_loads(tmp_path: Path) -> None:
    (block,) = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    path = tmp_path / "gateway.toml"
    path.write_text(block)
    policy = policy_for(load_config(path, env={}), "main")
    assert policy.mode == "risky" and policy.ask_threshold is RiskTier.MEDIUM
    assert policy.tools == {"write"} and policy.mcp_servers == {"github"} and policy.timeout_s == 600
