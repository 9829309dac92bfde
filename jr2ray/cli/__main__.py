"""`python -m jr2ray.cli`, as the tests and `jr2ray` itself run it."""

from jr2ray.cli.main import main

raise SystemExit(main())
