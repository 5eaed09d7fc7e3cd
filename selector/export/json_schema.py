"""The JSON Schema of `output=json` (docs/selection.schema.json), generated from the pydantic models.

    python -m kselect.selector.export.json_schema > docs/selection.schema.json

SCHEMA_VERSION rises when a field is renamed or removed or its meaning changes (adding a field keeps it); every
`output=json` object carries it as `schema_version`.
"""

from __future__ import annotations

import json

from ..outputs.selection import Selection

SCHEMA_VERSION = 1


def selection_schema() -> dict:
    s = Selection.model_json_schema(mode="serialization")
    s["properties"] = {"schema_version": {"const": SCHEMA_VERSION, "title": "Schema Version"}, **s["properties"]}
    s["required"] = ["schema_version", *s.get("required", [])]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "kselect selection (kselect select output=json)", **s}


if __name__ == "__main__":
    print(json.dumps(selection_schema(), indent=2))
