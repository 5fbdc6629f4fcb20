from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.ingest_usage_events_body_item import IngestUsageEventsBodyItem
from ...models.ingest_usage_events_response_200 import IngestUsageEventsResponse200
from typing import cast



def _get_kwargs(
    *,
    body: list['IngestUsageEventsBodyItem'],

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/usage-events",
    }

    _kwargs["json"] = []
    for body_item_data in body:
        body_item = body_item_data.to_dict()
        _kwargs["json"].append(body_item)




    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[Error, IngestUsageEventsResponse200]]:
    if response.status_code == 200:
        response_200 = IngestUsageEventsResponse200.from_dict(response.json())



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


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[Error, IngestUsageEventsResponse200]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: list['IngestUsageEventsBodyItem'],

) -> Response[Union[Error, IngestUsageEventsResponse200]]:
    """  A batch of at most 1000 CloudEvents 1.0 usage events (subject = the customer id); each answered
    accepted, duplicate (its (customer, source, id) was accepted before) or rejected with its reason
    (docs/usage.md). Body at most 1 MiB.

    Args:
        body (list['IngestUsageEventsBodyItem']):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, IngestUsageEventsResponse200]]
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
    body: list['IngestUsageEventsBodyItem'],

) -> Optional[Union[Error, IngestUsageEventsResponse200]]:
    """  A batch of at most 1000 CloudEvents 1.0 usage events (subject = the customer id); each answered
    accepted, duplicate (its (customer, source, id) was accepted before) or rejected with its reason
    (docs/usage.md). Body at most 1 MiB.

    Args:
        body (list['IngestUsageEventsBodyItem']):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, IngestUsageEventsResponse200]
     """


    return sync_detailed(
        client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: list['IngestUsageEventsBodyItem'],

) -> Response[Union[Error, IngestUsageEventsResponse200]]:
    """  A batch of at most 1000 CloudEvents 1.0 usage events (subject = the customer id); each answered
    accepted, duplicate (its (customer, source, id) was accepted before) or rejected with its reason
    (docs/usage.md). Body at most 1 MiB.

    Args:
        body (list['IngestUsageEventsBodyItem']):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, IngestUsageEventsResponse200]]
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
    body: list['IngestUsageEventsBodyItem'],

) -> Optional[Union[Error, IngestUsageEventsResponse200]]:
    """  A batch of at most 1000 CloudEvents 1.0 usage events (subject = the customer id); each answered
    accepted, duplicate (its (customer, source, id) was accepted before) or rejected with its reason
    (docs/usage.md). Body at most 1 MiB.

    Args:
        body (list['IngestUsageEventsBodyItem']):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, IngestUsageEventsResponse200]
     """


    return (await asyncio_detailed(
        client=client,
body=body,

    )).parsed
