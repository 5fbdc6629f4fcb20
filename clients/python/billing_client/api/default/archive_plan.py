from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.archive_plan_body import ArchivePlanBody
from ...models.error import Error
from ...models.plan import Plan
from typing import cast



def _get_kwargs(
    code: str,
    *,
    body: ArchivePlanBody,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/plans/{code}/archive".format(code=code,),
    }

    _kwargs["json"] = body.to_dict()


    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[Error, Plan]]:
    if response.status_code == 200:
        response_200 = Plan.from_dict(response.json())



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


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[Error, Plan]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    code: str,
    *,
    client: AuthenticatedClient,
    body: ArchivePlanBody,

) -> Response[Union[Error, Plan]]:
    """  Archives the plan: no new subscription or plan change to it; the subscriptions on it continue and
    renew. Archived already: unchanged.

    Args:
        code (str):
        body (ArchivePlanBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, Plan]]
     """


    kwargs = _get_kwargs(
        code=code,
body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    code: str,
    *,
    client: AuthenticatedClient,
    body: ArchivePlanBody,

) -> Optional[Union[Error, Plan]]:
    """  Archives the plan: no new subscription or plan change to it; the subscriptions on it continue and
    renew. Archived already: unchanged.

    Args:
        code (str):
        body (ArchivePlanBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, Plan]
     """


    return sync_detailed(
        code=code,
client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    code: str,
    *,
    client: AuthenticatedClient,
    body: ArchivePlanBody,

) -> Response[Union[Error, Plan]]:
    """  Archives the plan: no new subscription or plan change to it; the subscriptions on it continue and
    renew. Archived already: unchanged.

    Args:
        code (str):
        body (ArchivePlanBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, Plan]]
     """


    kwargs = _get_kwargs(
        code=code,
body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    code: str,
    *,
    client: AuthenticatedClient,
    body: ArchivePlanBody,

) -> Optional[Union[Error, Plan]]:
    """  Archives the plan: no new subscription or plan change to it; the subscriptions on it continue and
    renew. Archived already: unchanged.

    Args:
        code (str):
        body (ArchivePlanBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, Plan]
     """


    return (await asyncio_detailed(
        code=code,
client=client,
body=body,

    )).parsed
