from http import HTTPStatus
from typing import Any, Optional, Union, cast

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error import Error
from ...models.payment_method import PaymentMethod
from ...models.set_payment_method_body import SetPaymentMethodBody
from typing import cast
from typing import cast, Union



def _get_kwargs(
    id: Union[int, str],
    *,
    body: SetPaymentMethodBody,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}


    

    

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/customers/{id}/payment-method".format(id=id,),
    }

    _kwargs["json"] = body.to_dict()


    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Optional[Union[Error, PaymentMethod]]:
    if response.status_code == 200:
        response_200 = PaymentMethod.from_dict(response.json())



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


def _build_response(*, client: Union[AuthenticatedClient, Client], response: httpx.Response) -> Response[Union[Error, PaymentMethod]]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    id: Union[int, str],
    *,
    client: AuthenticatedClient,
    body: SetPaymentMethodBody,

) -> Response[Union[Error, PaymentMethod]]:
    r"""  With a server key: the method by its provider references. With a customer session (cs_...): only
    {\"provider\": \"stripe\", \"setupIntentId\": \"seti_...\"}, a SetupIntent the provider confirms was
    made for this customer and succeeded (403 for anything else or one it cannot prove, 422 for one not
    succeeded; docs/security.md).

    Args:
        id (Union[int, str]):
        body (SetPaymentMethodBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, PaymentMethod]]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    id: Union[int, str],
    *,
    client: AuthenticatedClient,
    body: SetPaymentMethodBody,

) -> Optional[Union[Error, PaymentMethod]]:
    r"""  With a server key: the method by its provider references. With a customer session (cs_...): only
    {\"provider\": \"stripe\", \"setupIntentId\": \"seti_...\"}, a SetupIntent the provider confirms was
    made for this customer and succeeded (403 for anything else or one it cannot prove, 422 for one not
    succeeded; docs/security.md).

    Args:
        id (Union[int, str]):
        body (SetPaymentMethodBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, PaymentMethod]
     """


    return sync_detailed(
        id=id,
client=client,
body=body,

    ).parsed

async def asyncio_detailed(
    id: Union[int, str],
    *,
    client: AuthenticatedClient,
    body: SetPaymentMethodBody,

) -> Response[Union[Error, PaymentMethod]]:
    r"""  With a server key: the method by its provider references. With a customer session (cs_...): only
    {\"provider\": \"stripe\", \"setupIntentId\": \"seti_...\"}, a SetupIntent the provider confirms was
    made for this customer and succeeded (403 for anything else or one it cannot prove, 422 for one not
    succeeded; docs/security.md).

    Args:
        id (Union[int, str]):
        body (SetPaymentMethodBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Union[Error, PaymentMethod]]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    id: Union[int, str],
    *,
    client: AuthenticatedClient,
    body: SetPaymentMethodBody,

) -> Optional[Union[Error, PaymentMethod]]:
    r"""  With a server key: the method by its provider references. With a customer session (cs_...): only
    {\"provider\": \"stripe\", \"setupIntentId\": \"seti_...\"}, a SetupIntent the provider confirms was
    made for this customer and succeeded (403 for anything else or one it cannot prove, 422 for one not
    succeeded; docs/security.md).

    Args:
        id (Union[int, str]):
        body (SetPaymentMethodBody):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Union[Error, PaymentMethod]
     """


    return (await asyncio_detailed(
        id=id,
client=client,
body=body,

    )).parsed
