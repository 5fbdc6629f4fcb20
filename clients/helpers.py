"""Hand-written helpers of the generated client (copied into billing_client by `make client` from
clients/helpers.py; edit that file, never the copy).

* `paginate` / `apaginate`: every item of a /v1 list, page after page (starting_after = the page's
  nextCursor), sync and async.
* `call_with_retries` / `acall_with_retries`: an operation called again after a lost answer (a
  transport error, a 429 or a 5xx) with the very same arguments, so a create with an
  Idempotency-Key is retried with the same key: the server answers the first result again (200)
  instead of creating twice (docs/http-api.md).
* `new_idempotency_key`: a fresh key for a create.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncIterator, Callable, Iterator

import httpx

from .types import UNSET, Response

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class ApiError(Exception):
    """A list page that did not come: the error body the server answered (or None)."""

    def __init__(self, answer: Any) -> None:
        super().__init__(repr(answer))
        self.answer = answer


def new_idempotency_key() -> str:
    return f"idem-{uuid.uuid4()}"


def _cursor(value: str | None, cursor_type: type):
    return UNSET if value is None else cursor_type(value)


def paginate(operation, *, client, page_size: int = 100, cursor_type: type = int, **filters) -> Iterator[Any]:
    """Every item of the list `operation` (a module of billing_client.api.default such as
    list_subscriptions), newest first. `cursor_type`: int for ids, str for codes (coupons, tax rates)."""
    cursor = None
    while True:
        page = operation.sync(client=client, limit=page_size, starting_after=_cursor(cursor, cursor_type), **filters)
        if page is None or not hasattr(page, "data"):
            raise ApiError(page)
        yield from page.data
        if not page.has_more:
            return
        cursor = page.next_cursor


async def apaginate(operation, *, client, page_size: int = 100, cursor_type: type = int,
                    **filters) -> AsyncIterator[Any]:
    cursor = None
    while True:
        page = await operation.asyncio(client=client, limit=page_size, starting_after=_cursor(cursor, cursor_type),
                                       **filters)
        if page is None or not hasattr(page, "data"):
            raise ApiError(page)
        for item in page.data:
            yield item
        if not page.has_more:
            return
        cursor = page.next_cursor


def call_with_retries(operation, *, attempts: int = 4, backoff: float = 0.2,
                      sleep: Callable[[float], None] = time.sleep, **kwargs) -> Response:
    """`operation.sync_detailed(**kwargs)`, again with the same kwargs (the same Idempotency-Key)
    after a transport error, a 429 or a 5xx; the last answer, or the last error raised."""
    for attempt in range(attempts):
        try:
            response = operation.sync_detailed(**kwargs)
        except httpx.TransportError:
            if attempt == attempts - 1:
                raise
        else:
            if int(response.status_code) not in RETRIED_STATUSES or attempt == attempts - 1:
                return response
        sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")


async def acall_with_retries(operation, *, attempts: int = 4, backoff: float = 0.2, **kwargs) -> Response:
    for attempt in range(attempts):
        try:
            response = await operation.asyncio_detailed(**kwargs)
        except httpx.TransportError:
            if attempt == attempts - 1:
                raise
        else:
            if int(response.status_code) not in RETRIED_STATUSES or attempt == attempts - 1:
                return response
        await asyncio.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")
