"""The API fuzzed from its own OpenAPI schema (schemathesis), in-process, against real Run actors.

Bounded and repeatable: a fixed number of examples per operation and a fixed seed, no example database. Every
response must not be a 5xx, and a documented response must match its schema. The count of generated requests (and
of failures, which must be 0) is printed at the end of the module.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, seed, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

pytestmark = pytest.mark.ray

EXAMPLES_PER_OPERATION = 12
SEED = 16
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def api_schema(asgi_app: FastAPI) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", asgi_app)


def summary() -> str:
    """What the tier prints at the end of the run (see tests/api/conftest.py)."""
    return (f"schemathesis: {COUNTS['requests']} generated requests over {COUNTS['operations']} operations "
            f"(at most {EXAMPLES_PER_OPERATION} fuzzed examples each plus schemathesis' deterministic coverage cases, "
            f"seed {SEED}), {COUNTS['failures']} failures")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@seed(SEED)
@settings(max_examples=EXAMPLES_PER_OPERATION, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_route_answers_5xx_or_breaks_its_schema(case: Any, token: str) -> None:
    COUNTS["requests"] += 1
    try:
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"},
                               checks=[not_a_server_error, response_schema_conformance])
    except Exception:
        COUNTS["failures"] += 1
        raise


def test_zz_count_every_operation_ran(api_schema: Any) -> None:
    """Last in the module: every operation was fuzzed, and at least once per operation."""
    operations = [op for op in api_schema.get_all_operations()]
    COUNTS["operations"] = len(operations)
    assert COUNTS["requests"] >= len(operations) > 0
    assert COUNTS["failures"] == 0
