"""The HTTP API and Console: FastAPI, deployed as a Ray Serve ingress.

Where things are:
- `app.build_app(config)` builds one app; `config.ApiConfig` is what it needs.
- `routes/` has one APIRouter per resource (workflows, runs, gates, agents, console); a new route goes there.
- `middleware` checks the token and the body size; `refusals` words every refusal the API gives.
- `schemas` are the request and response bodies; `sse` is the run's event feed; `docs` serves /docs offline.
- `deploy.build_serve_app` is what a serve config names; `deploy.deploy_api` is what `jr2ray up` calls.
- `proxy` is the middleware Serve's HTTP proxy runs: its own errors answered as the API's JSON 503.

Importing this package builds nothing and needs no Ray.
"""

from .app import build_app
from .config import ApiConfig
from .context import ApiContext
from .deploy import APP_NAME, BUILDER_IMPORT_PATH, ServeArgs, build_serve_app, deploy_api

__all__ = ["APP_NAME", "BUILDER_IMPORT_PATH", "ApiConfig", "ApiContext", "ServeArgs", "build_app", "build_serve_app",
           "deploy_api"]
