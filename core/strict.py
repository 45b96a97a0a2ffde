"""The base of every recipe schema: unknown fields are errors, so a typo is named instead of ignored."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
