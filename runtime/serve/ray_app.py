"""The same server on Ray Serve: N replicas of the app behind Ray's HTTP proxy.

    from edgeformer.runtime.serve.app import ServeConfig
    from edgeformer.runtime.serve.ray_app import deployment
    from ray import serve
    serve.run(deployment(ServeConfig(("shakespeare",)), replicas=2))

Each replica is a process that loads the packages and runs the ASGI app of app.py (its own
continuous batch and prefix cache); Ray's proxy spreads the requests over them (Ray's own
routing: a replica with fewer requests in flight first). `edgeformer serve --replicas N` runs
this on a local Ray instance. Ray is the `ray` extra: pip install 'edgeformer[cpu,serve,ray]'.
"""

from __future__ import annotations

from typing import Any

from .app import ServeConfig, create_app


def deployment(config: ServeConfig, replicas: int = 2, cpus_per_replica: float = 1.0) -> Any:
    """A Ray Serve application (serve.run's argument) of `replicas` copies of the server."""
    from ray import serve

    if replicas < 1:
        raise ValueError(f"replicas={replicas} must be >= 1")

    def build() -> Any:  # evaluated on each replica: the packages load there
        return create_app(config)

    ingress: Any = serve.ingress(build)()
    options = {"num_cpus": cpus_per_replica}
    replica = serve.deployment(name="edgeformer", num_replicas=replicas, ray_actor_options=options)
    return replica(ingress).bind()


def run(config: ServeConfig, host: str, port: int, replicas: int) -> None:
    """Start a local Ray instance and serve `config` on host:port until interrupted."""
    import ray
    from ray import serve

    ray.init(include_dashboard=False, configure_logging=False)
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(deployment(config, replicas), route_prefix="/", blocking=True)
    finally:
        serve.shutdown()
        ray.shutdown()
