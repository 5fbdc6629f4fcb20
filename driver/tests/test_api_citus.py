"""The HTTP API in process over the Citus cluster: the single-node API tests, run unchanged on a
throwaway `--citus` database (docs/scaling.md: the SQL API is the same on the coordinator)."""

from __future__ import annotations

import pytest

from . import test_api, test_api_invoice_actions, test_api_lifecycle

CASES = {
    "create, replay and get": test_api.test_create_replay_and_get,
    "create errors": test_api.test_create_errors,
    "cancel and If-Match": test_api.test_cancel_and_if_match,
    "change plan": test_api.test_change_plan,
    "bad input is 4xx": test_api.test_bad_input_is_4xx_with_the_error_body,
}
for module in (test_api_lifecycle, test_api_invoice_actions):
    for name in dir(module):
        fn = getattr(module, name)
        if name.startswith("test_") and callable(fn) and fn.__code__.co_varnames[:fn.__code__.co_argcount] == ("db_url",):
            CASES[f"{module.__name__.rsplit('.', 1)[-1]}: {name[5:]}"] = fn


@pytest.mark.parametrize("name", sorted(CASES))
def test_http_api_on_citus(citus_db_url, name):
    CASES[name](citus_db_url)
