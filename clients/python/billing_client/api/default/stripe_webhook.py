from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.stripe_webhook_body import StripeWebhookBody
from ...models.stripe_webhook_response_200 import StripeWebhookResponse200
from typing import cast



def _get_kwargs(
    *,
    body: StripeWebhookBody,
    stripe_signature: str,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    headers["Stripe-Signature"] = stripe_signature



    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/webhooks/stripe",
    }

    _kwargs["json"] = body.to_dict()


    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[Error, StripeWebhookResponse200]]:
    if response.status_code == 200:
        response_200 = StripeWebhookResponse200.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())



        return response_400

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

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[Error, StripeWebhookResponse200]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: Union[AuthenticatedClient, Client],
    body: StripeWebhookBody,
    stripe_signature: str,

) -> Response[Union[Error, StripeWebhookResponse200]]:
    """ 
    Args:
        stripe_signature (str):
        body (StripeWebhookBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, StripeWebhookResponse200]]
     """


    kwargs = _get_kwargs(
        body=body,
stripe_signature=stripe_signature,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: Union[AuthenticatedClient, Client],
    body: StripeWebhookBody,
    stripe_signature: str,

) -> Optional[Union[Error, StripeWebhookResponse200]]:
    """ 
    Args:
        stripe_signature (str):
        body (StripeWebhookBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, StripeWebhookResponse200]
     """


    return sync_detailed(
        client=client,
body=body,
stripe_signature=stripe_signature,

    ).parsed

async def asyncio_detailed(
    *,
    client: Union[AuthenticatedClient, Client],
    body: StripeWebhookBody,
    stripe_signature: str,

) -> Response[Union[Error, StripeWebhookResponse200]]:
    """ 
    Args:
        stripe_signature (str):
        body (StripeWebhookBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, StripeWebhookResponse200]]
     """


    kwargs = _get_kwargs(
        body=body,
stripe_signature=stripe_signature,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: Union[AuthenticatedClient, Client],
    body: StripeWebhookBody,
    stripe_signature: str,

) -> Optional[Union[Error, StripeWebhookResponse200]]:
    """ 
    Args:
        stripe_signature (str):
        body (StripeWebhookBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, StripeWebhookResponse200]
     """


    return (await asyncio_detailed(
        client=client,
body=body,
stripe_signature=stripe_signature,

    )).parsed
