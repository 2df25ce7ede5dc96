"""The pydantic base of the engine's configuration types (`Model`, `ModelCost`).

These are validated from user configuration and built rarely, so they keep pydantic's validation;
the types built per message or per event use `agent_core._wire.WireStruct`. Python attributes are
snake_case; JSON is camelCase exactly as pi writes it. `dump()` is the one way to turn a model
into JSON-ready data: aliases on, unset optional fields (``None``) left out, as pi omits
``undefined`` fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Base for the configuration types."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        arbitrary_types_allowed=True,
        ser_json_inf_nan="constants",
    )

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict with camelCase keys and no ``None`` fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
