"""The memory console at /console (docs/console.md): server-rendered pages over the same
services as the REST API, behind the same keys (app/console/auth.py)."""

from app.console.routes import router

__all__ = ["router"]
