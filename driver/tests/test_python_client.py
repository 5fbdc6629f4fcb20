"""The generated Python client (clients/python, make client) against a live `billing serve`: typed
calls, the pagination helper over several pages (sync and async), and a create retried with the
same Idempotency-Key after its answer was lost (one subscription, the same id twice)."""

from __future__ import annotations

import asyncio
import os
import sys

import httpx
import psycopg
import pytest

from billing.config import REPO_ROOT

from .chaos.harness import BILLING, Proc, free_ports, wait_port
from .conftest import create_test_key

sys.path.insert(0, str(REPO_ROOT / "clients" / "python"))

from billing_client import AuthenticatedClient  # noqa: E402
from billing_client.api.default import (  # noqa: E402
    create_customer, create_subscription, get_subscription, list_subscriptions,
)
from billing_client.helpers import apaginate, call_with_retries, new_idempotency_key, paginate  # noqa: E402
from billing_client.models import CreateCustomerBody, CreateSubscriptionBody, Subscription  # noqa: E402


@pytest.fixture
def server(db_url, tmp_path):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('CL_MONTHLY', 1500, 'USD', 'MONTH', 1)")
    key = create_test_key(db_url, "admin", name="client")
    port, = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
    env.update(BILLING_DATABASE_URL=db_url, BILLING_LOG_LEVEL="WARNING", BILLING_API_RATE_PER_KEY="100000",
               BILLING_API_BURST_PER_KEY="100000")
    proc = Proc("serve", [BILLING, "serve", "--port", str(port)], env, tmp_path)
    proc.start()
    try:
        assert wait_port(port, 30), proc.tail()
        yield f"http://127.0.0.1:{port}", key
    finally:
        proc.stop(timeout=10)


class LoseFirstAnswer(httpx.BaseTransport):
    """Sends each request; the first answer is lost on the way back (the server did the work)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        self.sent += 1
        if self.sent == 1:
            response.read()
            response.close()
            raise httpx.ReadError("connection reset before the answer arrived", request=request)
        return response


def test_the_generated_client_against_a_live_server(server):
    base, key = server
    client = AuthenticatedClient(base_url=base, token=key)
    made = create_customer.sync(client=client, body=CreateCustomerBody(id=4000, email="cl@example.com"))
    assert made.id == 4000 and made.email == "cl@example.com"
    ids = []
    for n in range(12):
        sub = create_subscription.sync(client=client, idempotency_key=new_idempotency_key(),
                                       body=CreateSubscriptionBody(customer_id=4000 + n % 3, plan_code="CL_MONTHLY"))
        assert isinstance(sub, Subscription), sub
        ids.append(sub.id)
    walked = [s.id for s in paginate(list_subscriptions, client=client, page_size=5, plan_code="CL_MONTHLY")]
    assert walked == sorted(ids, reverse=True), "three pages, every subscription once, newest first"
    by_customer = [s.id for s in paginate(list_subscriptions, client=client, page_size=2, customer_id=4001)]
    assert by_customer == sorted(ids[1::3], reverse=True)

    async def walk_async():
        async_client = AuthenticatedClient(base_url=base, token=key)
        return [s.id async for s in apaginate(list_subscriptions, client=async_client, page_size=4,
                                                 plan_code="CL_MONTHLY")]

    assert asyncio.run(walk_async()) == walked

    # A create whose answer is lost: retried with the same Idempotency-Key, one subscription.
    lossy = LoseFirstAnswer()
    flaky = AuthenticatedClient(base_url=base, token=key, httpx_args={"transport": lossy})
    idem = new_idempotency_key()
    body = CreateSubscriptionBody(customer_id=4100, plan_code="CL_MONTHLY")
    answer = call_with_retries(create_subscription, client=flaky, body=body, idempotency_key=idem, sleep=lambda s: None)
    assert lossy.sent == 2 and answer.status_code == 200, (lossy.sent, answer.status_code, answer.content)
    replayed = answer.parsed
    assert isinstance(replayed, Subscription) and replayed.customer_id == 4100
    mine = list(paginate(list_subscriptions, client=client, customer_id=4100))
    assert [s.id for s in mine] == [replayed.id], "the lost answer's subscription, once"
    assert get_subscription.sync(client=client, id=replayed.id).status.value == "ACTIVE"
