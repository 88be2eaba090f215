"""`make proto`: writes the JSON Schema of every message and API model to a folder."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from flawforge.proto import import_all
from flawforge.proto.base import Model


def all_models() -> dict[str, type[BaseModel]]:
    import_all()
    found: dict[str, type[BaseModel]] = {}

    def walk(cls):
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("flawforge.proto."):
                found[f"{sub.__module__.rsplit('.', 1)[1]}.{sub.__name__}"] = sub
            walk(sub)

    walk(Model)
    return dict(sorted(found.items()))


def export(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in all_models().items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    paths = export(Path(sys.argv[1] if len(sys.argv) > 1 else "proto/schemas"))
    print(f"wrote {len(paths)} schemas")
