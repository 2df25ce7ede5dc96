"""Finding Python extensions without running any of their code.

Two places are searched: the entry points of the group ``agent_gateway.extensions`` in the
installed distributions (their metadata only: `importlib.metadata` reads ``entry_points.txt``,
it does not import the module the entry point names), and the directory ``<home>/extensions``
(file and directory names only: ``<name>.py`` or ``<name>/__init__.py``). Nothing found here is
imported; the extension host imports an extension once it is enabled.

Each extension has a name (the entry point's or the file's) and an origin, the text that says
where it came from (``entry point hello = hello_ext:register (hello-gateway-ext)``,
``file /home/me/.gateway/extensions/audit.py``). Trust is granted to a name at an origin.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Literal

import msgspec

ENTRY_POINT_GROUP = "agent_gateway.extensions"
EXTENSION_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
EXTENSION_NAME_RULE = "1-64 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"


class Discovered(msgspec.Struct, frozen=True):
    """An extension found (not imported)."""

    name: str
    kind: Literal["entry-point", "file"]
    target: str
    """The entry point's value (`module` or `module:function`), or the file to import."""
    origin: str
    distribution: str | None = None
    version: str | None = None


class Discovery(msgspec.Struct, frozen=True):
    found: tuple[Discovered, ...]
    problems: tuple[str, ...]
    """One line per candidate that was skipped (bad name, a name found twice)."""


def extensions_dir(home: Path) -> Path:
    return home / "extensions"


def discover(home: Path) -> Discovery:
    """Every extension in the entry-point group and in `<home>/extensions`, by name. A name
    found twice keeps its first finding (entry points before files) and reports the other."""
    found: dict[str, Discovered] = {}
    problems: list[str] = []
    for candidate in [*_entry_points(problems), *_files(extensions_dir(home), problems)]:
        first = found.get(candidate.name)
        if first is not None:
            problems.append(
                f"extension {candidate.name} ({candidate.origin}) ignored: {first.origin} has that name"
            )
            continue
        found[candidate.name] = candidate
    return Discovery(tuple(found[name] for name in sorted(found)), tuple(problems))


def _entry_points(problems: list[str]) -> list[Discovered]:
    out = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = point.dist
        dist_name = dist.metadata["Name"] if dist is not None else None
        where = f" ({dist_name})" if dist_name else ""
        origin = f"entry point {point.name} = {point.value}{where}"
        if not EXTENSION_NAME.match(point.name):
            problems.append(f"{origin} ignored: an extension name is {EXTENSION_NAME_RULE}")
            continue
        version = dist.version if dist is not None else None
        out.append(Discovered(point.name, "entry-point", point.value, origin, dist_name, version))
    return out


def _files(directory: Path, problems: list[str]) -> list[Discovered]:
    try:
        entries = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(f"cannot list {directory}: {exc}")
        return []
    out = []
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue
        if entry.suffix == ".py" and entry.is_file():
            name, target = entry.stem, entry
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            name, target = entry.name, entry / "__init__.py"
        else:
            continue
        if not EXTENSION_NAME.match(name):
            problems.append(f"{entry} ignored: an extension name is {EXTENSION_NAME_RULE}")
            continue
        out.append(Discovered(name, "file", str(target), f"file {target}"))
    return out


def extensions_present(home: Path) -> bool:
    """Whether any extension is installed or dropped in (cheap: metadata and a directory
    listing), so the daemon knows whether to start the extension host at all."""
    return bool(entry_points(group=ENTRY_POINT_GROUP)) or any(
        not entry.name.startswith((".", "_")) for entry in _listing(extensions_dir(home))
    )


def _listing(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []
