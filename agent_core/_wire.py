"""The msgspec base shared by the engine's messages, content blocks, events and model contexts.

Python attributes are snake_case; JSON (wire and database) is camelCase exactly as pi writes it.
These types are built per streamed delta and held by the thousand in a context, so they are
msgspec structs: construction does no validation (the type hints are the contract), an instance
costs about as much memory as a slots object, and JSON is decoded straight into them.

Rules every subclass follows:

- `kw_only=True` on every class that declares fields (msgspec does not inherit it).
- The discriminator (`type` of blocks and events, `role` of messages) is a msgspec tag, written
  first in the JSON; the class also exposes it as a `ClassVar` so that ``event.type`` and
  ``message.role`` read as before.
- A field whose default is ``None`` is left out of the JSON while it is ``None`` (pi omits
  ``undefined`` fields). Every other default is given as a ``default_factory`` that is not a bare
  ``list``/``dict``/``set`` (see `always`), so that it is always written: msgspec leaves out a
  field equal to a plain default, and an empty collection made by the bare builtin factory.

`dump()` is the one way to turn an instance into JSON-ready data; `decoder`/`convert` in the
modules that define the unions are the way back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

_T = TypeVar("_T")


class WireStruct(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, repr_omit_defaults=True):
    """Base of every wire type of the engine; see the module docstring."""

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict with camelCase keys and no ``None`` optional fields."""
        data: dict[str, Any] = msgspec.to_builtins(self, enc_hook=encode_other)
        return data


def always(value: Callable[[], _T]) -> Any:
    """A struct field default that is always written to JSON: ``field(default_factory=value)``
    wrapped so that msgspec never treats it as omittable (it omits empty collections made by the
    bare ``list``/``dict`` factories)."""

    def make() -> _T:
        return value()

    return msgspec.field(default_factory=make)


def encode_other(value: Any) -> Any:
    """What `dump` writes for a value msgspec has no rule for: anything with a `dump()` (custom
    messages), a pydantic model as its JSON form, otherwise its text."""
    dump = getattr(value, "dump", None)
    if callable(dump):
        return dump()
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(by_alias=True, exclude_none=True, mode="json")
    return str(value)
