"""The Serve application: ``build_app(AppArgs)`` -> ingress (FastAPI) + engine deployment.

Used by the configs (``import_path: deploy.app:build_app``) and by tests (``serve.run``).
Serve validates the ``args:`` block against ``AppArgs`` (typed builder; unknown fields are
rejected). ``k_max`` and ``adaptive`` become the engine's ``user_config``, so a config change
of only those reconfigures the live replica instead of restarting it.
"""

# No `from __future__ import annotations`: Serve reads the builder's real `AppArgs`
# annotation to validate the config's `args:` against it.

from ray.serve import Application

from deploy.api import OpenAIServer
from deploy.config import AppArgs
from deploy.engine import LLMEngine

# The replicas do no heavy work themselves (the model actors do): no CPU reservation, so
# the app fits a 2-core machine next to its two model actors.
LIGHT = {"num_cpus": 0}


def build_app(args: AppArgs) -> Application:
    engine = LLMEngine.options(  # type: ignore[attr-defined]
        ray_actor_options=LIGHT, user_config=args.knobs.model_dump()).bind(args)
    return OpenAIServer.options(  # type: ignore[attr-defined]
        ray_actor_options=LIGHT).bind(engine, args)
