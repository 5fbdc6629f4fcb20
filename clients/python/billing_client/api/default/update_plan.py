from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.plan import Plan
from ...models.update_plan_body import UpdatePlanBody
from typing import cast



def _get_kwargs(
    code: str,
    *,
    body: UpdatePlanBody,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "patch",
        "url": "/v1/plans/{code}".format(code=code,),
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
    body: UpdatePlanBody,

) -> Response[Union[Error, Plan]]:
    """  Says whether customers may sign up to the plan themselves with a customer session (selfServe); the
    signups in flight are waited for, so none is made after a switch-off. The same value again:
    unchanged.

    Args:
        code (str):
        body (UpdatePlanBody):

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
    body: UpdatePlanBody,

) -> Optional[Union[Error, Plan]]:
    """  Says whether customers may sign up to the plan themselves with a customer session (selfServe); the
    signups in flight are waited for, so none is made after a switch-off. The same value again:
    unchanged.

    Args:
        code (str):
        body (UpdatePlanBody):

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
    body: UpdatePlanBody,

) -> Response[Union[Error, Plan]]:
    """  Says whether customers may sign up to the plan themselves with a customer session (selfServe); the
    signups in flight are waited for, so none is made after a switch-off. The same value again:
    unchanged.

    Args:
        code (str):
        body (UpdatePlanBody):

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
    body: UpdatePlanBody,

) -> Optional[Union[Error, Plan]]:
    """  Says whether customers may sign up to the plan themselves with a customer session (selfServe); the
    signups in flight are waited for, so none is made after a switch-off. The same value again:
    unchanged.

    Args:
        code (str):
        body (UpdatePlanBody):

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
