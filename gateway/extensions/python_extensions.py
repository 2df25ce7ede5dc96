"""The extension host: discovers Python extensions, keeps their trust states, loads the enabled
ones and holds what they registered.

Rule: an extension's code is imported only while its trust state is `enabled`. `refresh()`
discovers (without importing, `gateway.extensions.discovery`), records new extensions as
`pending`, loads enabled ones not loaded yet and withdraws what is no longer enabled (or no
longer found where it was approved). `set_state` is an operator's enable or disable and applies
at once, without a restart.

Loading imports the module in a worker thread (a slow import does not stall the gateway), then
calls its `register(ext)` and applies the registrations: slash commands to
`gateway.extensions.command_registry`, providers and models to `agent_core`. A failure anywhere
in loading is logged with its traceback, kept as the extension's `error` and undone; the daemon
and the other extensions carry on. Disabling withdraws every registration; the imported module
stays in memory until the daemon restarts (Python cannot unload it), but nothing of it is called.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from gateway.extensions import command_registry
from gateway.extensions.discovery import ENTRY_POINT_GROUP, Discovered, discover
from gateway.extensions.errors import ExtensionApiError, ExtensionLoadError
from gateway.extensions.extension_api import Extension, ExtensionTool, Registrations
from gateway.extensions.trust import TrustRecord, TrustState, TrustStore

__all__ = ["ExtensionHost", "LoadedExtension"]

log = structlog.get_logger("gateway.extensions")

Register = Callable[[Extension], Any]


@dataclass(frozen=True, slots=True)
class LoadedExtension:
    name: str
    found: Discovered
    registered: Registrations


class ExtensionHost:
    """See the module docstring. `home` holds `extensions/`; `trust` stores the states."""

    def __init__(self, home: Path, trust: TrustStore) -> None:
        self.home = home
        self.trust = trust
        self._found: dict[str, Discovered] = {}
        self._records: dict[str, TrustRecord] = {}
        self._loaded: dict[str, LoadedExtension] = {}
        self._errors: dict[str, str] = {}
        self._problems: tuple[str, ...] = ()
        self._lock = asyncio.Lock()
        self.changes = 0
        """Bumped whenever the set of loaded extensions changes (for callers that cache)."""

    # --- discovery and trust ---------------------------------------------------------------------

    async def refresh(self) -> None:
        """Discover, record new extensions as pending, load what is enabled, withdraw the rest.
        Raises sessions' StoreError when the trust table cannot be read or written."""
        async with self._lock:
            discovery = await asyncio.to_thread(discover, self.home)
            for problem in discovery.problems:
                if problem not in self._problems:
                    log.warning("extension skipped", problem=problem)
            self._problems = discovery.problems
            self._found = {found.name: found for found in discovery.found}
            self._records = await self.trust.all()
            for found in discovery.found:
                known = self._records.get(found.name)
                if known is None or known.origin != found.origin:
                    self._records[found.name] = await self.trust.discovered(found.name, found.origin)
            for name in list(self._loaded):
                if not self._should_run(name):
                    self._unload(name)
            for name in self._found:
                if self._should_run(name) and name not in self._loaded:
                    await self._load(self._found[name])

    async def set_state(self, name: str, state: TrustState, actor: str) -> TrustRecord:
        """An operator's enable or disable of extension `name`, applied at once. Returns the new
        record. Raises UnknownExtensionError, TrustTransitionError (`gateway.extensions.trust`)
        or sessions' StoreError; a failure to load is not raised (see `status`)."""
        async with self._lock:
            record, _ = await self.trust.change(name, state, actor)
            self._records[name] = record
            if state == TrustState.ENABLED:
                found = self._found.get(name)
                if found is not None and name not in self._loaded and self._should_run(name):
                    self._errors.pop(name, None)
                    await self._load(found)
            elif name in self._loaded:
                self._unload(name)
            return record

    def _should_run(self, name: str) -> bool:
        record = self._records.get(name)
        found = self._found.get(name)
        return (
            record is not None
            and found is not None
            and record.state == TrustState.ENABLED
            and record.origin == found.origin
        )

    # --- what the loaded extensions registered -----------------------------------------------------

    def loaded(self) -> list[LoadedExtension]:
        return [self._loaded[name] for name in sorted(self._loaded)]

    def tools(self) -> Iterator[tuple[str, ExtensionTool]]:
        """`(extension, tool)` for every tool of every loaded extension."""
        for loaded in self.loaded():
            for tool in loaded.registered.tools:
                yield loaded.name, tool

    def status(self) -> list[dict[str, Any]]:
        """One row per extension ever discovered (`extensions.list`)."""
        rows = []
        for name in sorted(set(self._records) | set(self._found)):
            record = self._records.get(name)
            found = self._found.get(name)
            loaded = self._loaded.get(name)
            registered = loaded.registered if loaded is not None else None
            rows.append(
                {
                    "name": name,
                    "state": record.state.value if record is not None else TrustState.PENDING.value,
                    "origin": found.origin if found is not None else record.origin if record else None,
                    "approvedOrigin": record.origin if record is not None else None,
                    "present": found is not None,
                    "version": found.version if found is not None else None,
                    "loaded": loaded is not None,
                    "error": self._errors.get(name),
                    "tools": [tool.name for tool in registered.tools] if registered else [],
                    "commands": [command.name for command in registered.commands] if registered else [],
                    "providers": [provider.api for provider in registered.providers] if registered else [],
                    "hooks": _hook_names(registered) if registered else [],
                    "changedBy": record.changed_by if record is not None else None,
                    "changedAt": record.changed_at if record is not None else None,
                }
            )
        return rows

    def problems(self) -> tuple[str, ...]:
        return self._problems

    # --- loading ------------------------------------------------------------------------------------

    async def _load(self, found: Discovered) -> None:
        try:
            register = await asyncio.to_thread(_import, found)
            ext = Extension(found.name)
            result = register(ext)
            if asyncio.iscoroutine(result):
                result.close()
                raise ExtensionLoadError("register() must be a plain function, not async")
            registered = ext.seal()
            self._check_tools(found.name, registered)
            self._apply(found.name, registered)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise
            message = _one_line(exc)
            self._errors[found.name] = message
            log.error("extension failed to load", extension=found.name, origin=found.origin, exc_info=exc)
            return
        self._loaded[found.name] = LoadedExtension(found.name, found, registered)
        self._errors.pop(found.name, None)
        self.changes += 1
        log.info(
            "extension loaded",
            extension=found.name,
            origin=found.origin,
            tools=[tool.name for tool in registered.tools],
            hooks=_hook_names(registered),
            commands=[command.name for command in registered.commands],
        )

    def _check_tools(self, name: str, registered: Registrations) -> None:
        taken = {tool.name: owner for owner, tool in self.tools()}
        for tool in registered.tools:
            if tool.name in taken:
                raise ExtensionApiError(
                    f"tool {tool.name!r} is already registered by extension {taken[tool.name]}"
                )

    def _apply(self, name: str, registered: Registrations) -> None:
        from agent_core.models import register_model
        from agent_core.providers import get_api_provider, register_api_provider

        applied_providers: list[str] = []
        try:
            for spec in registered.commands:
                command_registry.add_command(
                    command_registry.ExtensionCommand(
                        name=spec.name, description=spec.description, extension=name, handler=spec.handler
                    )
                )
            for provider in registered.providers:
                if get_api_provider(provider.api) is not None:
                    raise ExtensionApiError(f"provider api {provider.api!r} is already registered")
                register_api_provider(provider.api, provider.stream, provider.stream_simple)
                applied_providers.append(provider.api)
                for model in provider.models:
                    register_model(model)
        except BaseException:
            self._withdraw(name, applied_providers)
            raise

    def _unload(self, name: str) -> None:
        loaded = self._loaded.pop(name)
        self._withdraw(name, [provider.api for provider in loaded.registered.providers])
        self.changes += 1
        log.info("extension unloaded", extension=name)

    @staticmethod
    def _withdraw(name: str, apis: list[str]) -> None:
        from agent_core.providers import unregister_api_provider

        command_registry.remove_commands(name)
        for api in apis:
            unregister_api_provider(api)


def _import(found: Discovered) -> Register:
    """The `register` function of `found` (imports it; run in a worker thread). Raises
    ExtensionLoadError when there is none."""
    target: Any
    if found.kind == "entry-point":
        matches = [point for point in entry_points(group=ENTRY_POINT_GROUP, name=found.name)]
        if not matches:
            raise ExtensionLoadError(f"the entry point of {found.name} is gone")
        target = matches[0].load()
    else:
        target = _import_file(found.name, Path(found.target))
    register = getattr(target, "register", None) if isinstance(target, ModuleType) else target
    if not callable(register):
        raise ExtensionLoadError(f"{found.origin} has no register(ext) function")
    result: Register = register
    return result


def _import_file(name: str, path: Path) -> ModuleType:
    module_name = f"gateway_extension_{name.replace('-', '_')}"
    package = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(module_name, path, submodule_search_locations=package)
    if spec is None or spec.loader is None:
        raise ExtensionLoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _hook_names(registered: Registrations) -> list[str]:
    names = {
        "run_start": registered.run_start,
        "run_end": registered.run_end,
        "message_start": registered.message_start,
        "message_end": registered.message_end,
        "before_tool_call": registered.before_tool,
        "after_tool_call": registered.after_tool,
    }
    return [name for name, hooks in names.items() if hooks]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
