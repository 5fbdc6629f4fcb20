from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="SetPaymentMethodBody")



@_attrs_define
class SetPaymentMethodBody:
    """ 
        Attributes:
            brand (Union[None, Unset, str]):
            customer_ref (Union[None, Unset, str]):
            exp_month (Union[Unset, int]):
            exp_year (Union[Unset, int]):
            last4 (Union[None, Unset, str]):
            payment_method_ref (Union[Unset, str]):
            provider (Union[Unset, str]):
            setup_intent_id (Union[Unset, str]): A customer session's only way (with provider)
     """

    brand: Union[None, Unset, str] = UNSET
    customer_ref: Union[None, Unset, str] = UNSET
    exp_month: Union[Unset, int] = UNSET
    exp_year: Union[Unset, int] = UNSET
    last4: Union[None, Unset, str] = UNSET
    payment_method_ref: Union[Unset, str] = UNSET
    provider: Union[Unset, str] = UNSET
    setup_intent_id: Union[Unset, str] = UNSET





    def to_dict(self) -> dict[str, Any]:
        brand: Union[None, Unset, str]
        if isinstance(self.brand, Unset):
            brand = UNSET
        else:
            brand = self.brand

        customer_ref: Union[None, Unset, str]
        if isinstance(self.customer_ref, Unset):
            customer_ref = UNSET
        else:
            customer_ref = self.customer_ref

        exp_month = self.exp_month

        exp_year = self.exp_year

        last4: Union[None, Unset, str]
        if isinstance(self.last4, Unset):
            last4 = UNSET
        else:
            last4 = self.last4

        payment_method_ref = self.payment_method_ref

        provider = self.provider

        setup_intent_id = self.setup_intent_id


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if brand is not UNSET:
            field_dict["brand"] = brand
        if customer_ref is not UNSET:
            field_dict["customerRef"] = customer_ref
        if exp_month is not UNSET:
            field_dict["expMonth"] = exp_month
        if exp_year is not UNSET:
            field_dict["expYear"] = exp_year
        if last4 is not UNSET:
            field_dict["last4"] = last4
        if payment_method_ref is not UNSET:
            field_dict["paymentMethodRef"] = payment_method_ref
        if provider is not UNSET:
            field_dict["provider"] = provider
        if setup_intent_id is not UNSET:
            field_dict["setupIntentId"] = setup_intent_id

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_brand(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        brand = _parse_brand(d.pop("brand", UNSET))


        def _parse_customer_ref(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        customer_ref = _parse_customer_ref(d.pop("customerRef", UNSET))


        exp_month = d.pop("expMonth", UNSET)

        exp_year = d.pop("expYear", UNSET)

        def _parse_last4(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        last4 = _parse_last4(d.pop("last4", UNSET))


        payment_method_ref = d.pop("paymentMethodRef", UNSET)

        provider = d.pop("provider", UNSET)

        setup_intent_id = d.pop("setupIntentId", UNSET)

        set_payment_method_body = cls(
            brand=brand,
            customer_ref=customer_ref,
            exp_month=exp_month,
            exp_year=exp_year,
            last4=last4,
            payment_method_ref=payment_method_ref,
            provider=provider,
            setup_intent_id=setup_intent_id,
        )

        return set_payment_method_body

