from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.list_plans_archived import ListPlansArchived
from ...models.list_plans_response_200 import ListPlansResponse200
from ...types import UNSET, Unset
from typing import cast
from typing import Union



def _get_kwargs(
    *,
    limit: Union[Unset, int] = UNSET,
    starting_after: Union[Unset, int] = UNSET,
    ending_before: Union[Unset, int] = UNSET,
    archived: Union[Unset, ListPlansArchived] = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["limit"] = limit

    params["starting_after"] = starting_after

    params["ending_before"] = ending_before

    json_archived: Union[Unset, str] = UNSET
    if not isinstance(archived, Unset):
        json_archived = archived.value

    params["archived"] = json_archived


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/plans",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[Error, ListPlansResponse200]]:
    if response.status_code == 200:
        response_200 = ListPlansResponse200.from_dict(response.json())



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


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[Error, ListPlansResponse200]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    limit: Union[Unset, int] = UNSET,
    starting_after: Union[Unset, int] = UNSET,
    ending_before: Union[Unset, int] = UNSET,
    archived: Union[Unset, ListPlansArchived] = UNSET,

) -> Response[Union[Error, ListPlansResponse200]]:
    """  Plans, newest first

    Args:
        limit (Union[Unset, int]):
        starting_after (Union[Unset, int]):
        ending_before (Union[Unset, int]):
        archived (Union[Unset, ListPlansArchived]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, ListPlansResponse200]]
     """


    kwargs = _get_kwargs(
        limit=limit,
starting_after=starting_after,
ending_before=ending_before,
archived=archived,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    limit: Union[Unset, int] = UNSET,
    starting_after: Union[Unset, int] = UNSET,
    ending_before: Union[Unset, int] = UNSET,
    archived: Union[Unset, ListPlansArchived] = UNSET,

) -> Optional[Union[Error, ListPlansResponse200]]:
    """  Plans, newest first

    Args:
        limit (Union[Unset, int]):
        starting_after (Union[Unset, int]):
        ending_before (Union[Unset, int]):
        archived (Union[Unset, ListPlansArchived]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, ListPlansResponse200]
     """


    return sync_detailed(
        client=client,
limit=limit,
starting_after=starting_after,
ending_before=ending_before,
archived=archived,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    limit: Union[Unset, int] = UNSET,
    starting_after: Union[Unset, int] = UNSET,
    ending_before: Union[Unset, int] = UNSET,
    archived: Union[Unset, ListPlansArchived] = UNSET,

) -> Response[Union[Error, ListPlansResponse200]]:
    """  Plans, newest first

    Args:
        limit (Union[Unset, int]):
        starting_after (Union[Unset, int]):
        ending_before (Union[Unset, int]):
        archived (Union[Unset, ListPlansArchived]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, ListPlansResponse200]]
     """


    kwargs = _get_kwargs(
        limit=limit,
starting_after=starting_after,
ending_before=ending_before,
archived=archived,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    limit: Union[Unset, int] = UNSET,
    starting_after: Union[Unset, int] = UNSET,
    ending_before: Union[Unset, int] = UNSET,
    archived: Union[Unset, ListPlansArchived] = UNSET,

) -> Optional[Union[Error, ListPlansResponse200]]:
    """  Plans, newest first

    Args:
        limit (Union[Unset, int]):
        starting_after (Union[Unset, int]):
        ending_before (Union[Unset, int]):
        archived (Union[Unset, ListPlansArchived]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, ListPlansResponse200]
     """


    return (await asyncio_detailed(
        client=client,
limit=limit,
starting_after=starting_after,
ending_before=ending_before,
archived=archived,

    )).parsed
