from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.read_audit_response_200 import ReadAuditResponse200
from ...types import UNSET, Unset
from typing import cast
from typing import Union



def _get_kwargs(
    *,
    before_id: Union[Unset, int] = UNSET,
    limit: Union[Unset, int] = UNSET,
    actor: Union[Unset, str] = UNSET,
    function: Union[Unset, str] = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["beforeId"] = before_id

    params["limit"] = limit

    params["actor"] = actor

    params["function"] = function


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/admin/audit",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[Error, ReadAuditResponse200]]:
    if response.status_code == 200:
        response_200 = ReadAuditResponse200.from_dict(response.json())



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


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[Error, ReadAuditResponse200]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    before_id: Union[Unset, int] = UNSET,
    limit: Union[Unset, int] = UNSET,
    actor: Union[Unset, str] = UNSET,
    function: Union[Unset, str] = UNSET,

) -> Response[Union[Error, ReadAuditResponse200]]:
    """ 
    Args:
        before_id (Union[Unset, int]):
        limit (Union[Unset, int]):
        actor (Union[Unset, str]):
        function (Union[Unset, str]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, ReadAuditResponse200]]
     """


    kwargs = _get_kwargs(
        before_id=before_id,
limit=limit,
actor=actor,
function=function,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    before_id: Union[Unset, int] = UNSET,
    limit: Union[Unset, int] = UNSET,
    actor: Union[Unset, str] = UNSET,
    function: Union[Unset, str] = UNSET,

) -> Optional[Union[Error, ReadAuditResponse200]]:
    """ 
    Args:
        before_id (Union[Unset, int]):
        limit (Union[Unset, int]):
        actor (Union[Unset, str]):
        function (Union[Unset, str]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, ReadAuditResponse200]
     """


    return sync_detailed(
        client=client,
before_id=before_id,
limit=limit,
actor=actor,
function=function,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    before_id: Union[Unset, int] = UNSET,
    limit: Union[Unset, int] = UNSET,
    actor: Union[Unset, str] = UNSET,
    function: Union[Unset, str] = UNSET,

) -> Response[Union[Error, ReadAuditResponse200]]:
    """ 
    Args:
        before_id (Union[Unset, int]):
        limit (Union[Unset, int]):
        actor (Union[Unset, str]):
        function (Union[Unset, str]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, ReadAuditResponse200]]
     """


    kwargs = _get_kwargs(
        before_id=before_id,
limit=limit,
actor=actor,
function=function,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    before_id: Union[Unset, int] = UNSET,
    limit: Union[Unset, int] = UNSET,
    actor: Union[Unset, str] = UNSET,
    function: Union[Unset, str] = UNSET,

) -> Optional[Union[Error, ReadAuditResponse200]]:
    """ 
    Args:
        before_id (Union[Unset, int]):
        limit (Union[Unset, int]):
        actor (Union[Unset, str]):
        function (Union[Unset, str]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, ReadAuditResponse200]
     """


    return (await asyncio_detailed(
        client=client,
before_id=before_id,
limit=limit,
actor=actor,
function=function,

    )).parsed
