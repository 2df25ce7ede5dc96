"""`gateway.presence`: who gets an entry, one entry per instance, changes coalesced under a storm,
and a list that clients rebuild exactly from a snapshot and the changes that follow it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.presence import PresenceChanges, PresenceFeed, PresenceTable, presence_entry
from gateway.protocol.frames import RawJSON, dumps, response_ok


def entry(instance: str, **more: Any) -> dict[str, Any]:
    return {"ts": 1, "instanceId": instance, "mode": "ui", **more}


def apply(shown: dict[str, dict[str, Any]], changes: PresenceChanges) -> None:
    """What a client does with a `presence` event."""
    for item in changes.payload()["upserted"]:
        shown[item["instanceId"]] = item
    for instance in changes.payload()["removed"]:
        shown.pop(instance, None)


def test_one_off_commands_get_no_entry_and_unset_fields_are_left_out() -> None:
    scopes = {"operator.write", "operator.read"}
    assert presence_entry("c1", {"id": "cli", "mode": "cli"}, scopes, 5) is None
    assert presence_entry("c1", {"id": "x"}, scopes, 5) is None
    assert presence_entry("c1", {"mode": "ui", "platform": "linux"}, scopes, 5) == {
        "ts": 5,
        "instanceId": "c1",
        "mode": "ui",
        "platform": "linux",
        "scopes": ["operator.read", "operator.write"],
    }
    assert presence_entry("c1", {"mode": "cli", "instanceId": "i-1"}, (), 5) == {
        "ts": 5,
        "instanceId": "i-1",
        "mode": "cli",
        "scopes": [],
    }


def test_the_first_change_goes_at_once_and_a_storm_is_merged_per_window() -> None:
    table = PresenceTable(window_s=0.25)
    assert table.take(0.0) is None
    table.connect("c0", entry("a"))
    first = table.take(10.0)
    assert first is not None and first.upserted == [entry("a")] and first.removed == []
    # A storm: 200 connections within the window, and some of them gone again.
    for n in range(200):
        table.connect(f"s{n}", entry(f"i{n}"))
        table.take(10.0 + n * 0.001)  # not due: nothing is taken before the window ends
    for n in range(50):
        table.disconnect(f"s{n}")
    assert table.next_deadline() == 10.25
    assert table.take(10.2) is None
    batch = table.take(10.25)
    assert batch is not None
    assert [e["instanceId"] for e in batch.upserted] == [f"i{n}" for n in range(50, 200)]
    assert batch.removed == [f"i{n}" for n in range(50)]
    assert batch.version == table.version == 1 + 1 + 200 + 50
    assert table.next_deadline() is None and table.take(99.0) is None


def test_an_instance_connected_twice_shows_once_until_its_last_connection_closes() -> None:
    table = PresenceTable(window_s=0.0)
    table.connect("c1", entry("app", host="old"))
    table.connect("c2", entry("app", host="new"))
    assert table.entries() == [entry("app", host="new")]
    table.take(0.0)
    table.disconnect("c2")  # the newest connection leaves: the older one's details show again
    changes = table.take(1.0)
    assert changes is not None and changes.upserted == [entry("app", host="old")] and changes.removed == []
    table.disconnect("c1")
    changes = table.take(2.0)
    assert changes is not None and changes.upserted == [] and changes.removed == ["app"]
    assert table.entries() == [] and len(table) == 0
    table.disconnect("never-had-an-entry")
    assert table.take(3.0) is None


def test_a_hello_ok_snapshot_plus_the_changes_after_it_is_the_list() -> None:
    """A client's list: the published snapshot its `hello-ok` carried, then every batch sent
    after it, applied by instance id, is the table's list at every batch."""
    table = PresenceTable(window_s=0.1)
    clients: list[dict[str, dict[str, Any]]] = []
    now = 0.0
    for step in range(300):
        if step % 7 == 3:
            table.disconnect(f"c{step - 5}")
        else:
            table.connect(f"c{step}", entry(f"i{step % 40}", n=step))
        if step % 11 == 0:  # a client connects: its hello-ok
            clients.append({e["instanceId"]: e for e in json.loads(table.published_json())})
        now += 0.013
        batch = table.take(now)
        if batch is not None:
            for shown in clients:
                apply(shown, batch)
            truth = {e["instanceId"]: e for e in table.entries()}
            assert all(shown == truth for shown in clients)
            assert json.loads(table.published_json()) == table.entries()
            assert table.published_version == batch.version == table.version


def test_a_storm_sends_each_entry_once_to_each_client() -> None:
    """Clients that connect during a window get the list as of the last batch, and the window's
    entries once, in the batch that ends it."""
    table = PresenceTable(window_s=0.25)
    table.connect("c0", entry("first"))
    table.take(0.0)
    snapshots = []
    for n in range(1, 101):
        snapshots.append(table.published_json())
        table.connect(f"c{n}", entry(f"i{n}"))
    assert set(snapshots) == {table.published_json()}  # one serialised list for all of them
    assert [e["instanceId"] for e in json.loads(snapshots[0])] == ["first"]
    batch = table.take(0.25)
    assert batch is not None and len(batch.upserted) == 100


async def test_the_feed_sends_a_quiet_change_at_once_and_the_rest_when_the_window_ends() -> None:
    sent: list[PresenceChanges] = []
    feed = PresenceFeed(sent.append, window_s=0.05)
    feed.connect("c1", entry("a"))
    assert [c.upserted for c in sent] == [[entry("a")]]
    feed.connect("c2", entry("b"))
    feed.disconnect("c1")
    assert len(sent) == 1  # merged into the next batch
    async with asyncio.timeout(5):
        while len(sent) < 2:
            await asyncio.sleep(0.01)
    assert (sent[1].upserted, sent[1].removed, sent[1].version) == ([entry("b")], ["a"], feed.version)
    assert feed.entries() == [entry("b")]
    feed.close()


def test_the_serialised_list_is_the_list_and_is_spliced_as_it_is() -> None:
    table = PresenceTable(window_s=0.0)
    assert table.published_json() == "[]"
    table.connect("c1", entry("a", host="ünï"))
    table.connect("c2", entry("b"))
    table.take(0.0)
    assert json.loads(table.published_json()) == table.entries()
    kept = table.published_json()
    assert table.published_json() is kept  # encoded once until the next batch
    table.disconnect("c1")
    table.take(1.0)
    assert json.loads(table.published_json()) == [entry("b")]
    hello = {"type": "hello-ok", "snapshot": {"presence": RawJSON(table.published_json()), "n": [1, None]}}
    plain = {"type": "hello-ok", "snapshot": {"presence": table.entries(), "n": [1, None]}}
    assert response_ok("r1", hello) == response_ok("r1", plain)
    assert (
        dumps(RawJSON("[1]")) == "[1]" and dumps({1: RawJSON("2"), None: [True]}) == '{"1":2,"null":[true]}'
    )
