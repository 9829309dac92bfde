"""`python -m serve.llm [cpu|gpu|PATH]`: start Ray, deploy the profile's LLM app, print its base URL, keep serving."""

from __future__ import annotations

import time

from jr2ray.settings import load_settings

from .builders import deploy
from .configs import DEFAULT_PORT


def main(argv: list[str] | None = None) -> int:
    """`python -m serve.llm [cpu|gpu|PATH]`: start Ray, deploy, print the base URL, and keep serving until Ctrl-C."""
    import argparse

    import ray
    from ray import serve

    ap = argparse.ArgumentParser(prog="python -m serve.llm")
    ap.add_argument("profile", nargs="?", default="cpu")
    ap.add_argument("--num-cpus", type=int, default=4)
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ns = ap.parse_args(argv)
    ray.init(num_cpus=ns.num_cpus, include_dashboard=False)
    try:
        url = deploy(ns.profile, settings=load_settings(), port=ns.port, progress=print)  # this process's, once
        print(url, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
