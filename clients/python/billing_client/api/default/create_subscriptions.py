from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.create_subscriptions_body import CreateSubscriptionsBody
from ...models.create_subscriptions_response_200 import CreateSubscriptionsResponse200
from ...models.error import Error
from typing import cast



def _get_kwargs(
    *,
    body: CreateSubscriptionsBody,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/subscriptions/batch",
    }

    _kwargs["json"] = body.to_dict()


    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[CreateSubscriptionsResponse200, Error]]:
    if response.status_code == 200:
        response_200 = CreateSubscriptionsResponse200.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())



        return response_404

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())



        return response_409

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())



        return response_413

    if response.status_code == 415:
        response_415 = Error.from_dict(response.json())



        return response_415

    if response.status_code == 422:
        response_422 = Error.from_dict(response.json())



        return response_422

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())



        return response_429

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[CreateSubscriptionsResponse200, Error]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: CreateSubscriptionsBody,

) -> Response[Union[CreateSubscriptionsResponse200, Error]]:
    """  Signups in bulk: up to 1000 in one call, each what POST /v1/subscriptions makes of it under its own
    idempotencyKey (per API key, as that route's header); a key used before answers its subscription
    (replayed). All or nothing: 409 / 422 name the first row refused. Body at most 1 MiB.

    Args:
        body (CreateSubscriptionsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[CreateSubscriptionsResponse200, Error]]
     """


    kwargs = _get_kwargs(
        body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    body: CreateSubscriptionsBody,

) -> Optional[Union[CreateSubscriptionsResponse200, Error]]:
    """  Signups in bulk: up to 1000 in one call, each what POST /v1/subscriptions makes of it under its own
    idempotencyKey (per API key, as that route's header); a key used before answers its subscription
    (replayed). All or nothing: 409 / 422 name the first row refused. Body at most 1 MiB.

    Args:
        body (CreateSubscriptionsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[CreateSubscriptionsResponse200, Error]
     """


    return sync_detailed(
        client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: CreateSubscriptionsBody,

) -> Response[Union[CreateSubscriptionsResponse200, Error]]:
    """  Signups in bulk: up to 1000 in one call, each what POST /v1/subscriptions makes of it under its own
    idempotencyKey (per API key, as that route's header); a key used before answers its subscription
    (replayed). All or nothing: 409 / 422 name the first row refused. Body at most 1 MiB.

    Args:
        body (CreateSubscriptionsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[CreateSubscriptionsResponse200, Error]]
     """


    kwargs = _get_kwargs(
        body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    body: CreateSubscriptionsBody,

) -> Optional[Union[CreateSubscriptionsResponse200, Error]]:
    """  Signups in bulk: up to 1000 in one call, each what POST /v1/subscriptions makes of it under its own
    idempotencyKey (per API key, as that route's header); a key used before answers its subscription
    (replayed). All or nothing: 409 / 422 name the first row refused. Body at most 1 MiB.

    Args:
        body (CreateSubscriptionsBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[CreateSubscriptionsResponse200, Error]
     """


    return (await asyncio_detailed(
        client=client,
body=body,

    )).parsed
