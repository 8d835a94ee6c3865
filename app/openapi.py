"""Write the OpenAPI document: `python -m app.openapi > openapi/openapi.json`."""

from __future__ import annotations

import json
import sys

from app.main import create_app
from app.settings import Settings


def main() -> None:
    spec = create_app(Settings(_env_file=None)).openapi()
    sys.stdout.write(json.dumps(spec, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
