"""The `jr2ray` command: bring an instance up, then drive runs through its HTTP API.

One module per job: `main` (argparse, exit codes), `commands` (what each command does), `http` (the API client and
its SSE feed), `instance` (the instance file, `up`, `down`), `rayproc` (the Ray processes an instance owns), `format`
(what is printed), `errors` (every refusal's wording).
"""

from __future__ import annotations

from jr2ray.cli.commands import parse_json_arg
from jr2ray.cli.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CliError
from jr2ray.cli.http import Api
from jr2ray.cli.instance import Instance, read_instance
from jr2ray.cli.main import build_parser, main, split_passthrough
from jr2ray.cli.rayproc import join_ray

_join_ray = join_ray  # the name driver scripts and tests used before the package split

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "Api", "CliError", "Instance", "build_parser", "join_ray", "main",
           "parse_json_arg", "read_instance", "split_passthrough"]
