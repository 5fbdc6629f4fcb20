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
            exp_month (int):
            exp_year (int):
            payment_method_ref (str):
            provider (str):
            brand (Union[None, Unset, str]):
            customer_ref (Union[None, Unset, str]):
            last4 (Union[None, Unset, str]):
     """

    exp_month: int
    exp_year: int
    payment_method_ref: str
    provider: str
    brand: Union[None, Unset, str] = UNSET
    customer_ref: Union[None, Unset, str] = UNSET
    last4: Union[None, Unset, str] = UNSET





    def to_dict(self) -> dict[str, Any]:
        exp_month = self.exp_month

        exp_year = self.exp_year

        payment_method_ref = self.payment_method_ref

        provider = self.provider

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

        last4: Union[None, Unset, str]
        if isinstance(self.last4, Unset):
            last4 = UNSET
        else:
            last4 = self.last4


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "expMonth": exp_month,
            "expYear": exp_year,
            "paymentMethodRef": payment_method_ref,
            "provider": provider,
        })
        if brand is not UNSET:
            field_dict["brand"] = brand
        if customer_ref is not UNSET:
            field_dict["customerRef"] = customer_ref
        if last4 is not UNSET:
            field_dict["last4"] = last4

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        exp_month = d.pop("expMonth")

        exp_year = d.pop("expYear")

        payment_method_ref = d.pop("paymentMethodRef")

        provider = d.pop("provider")

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


        def _parse_last4(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        last4 = _parse_last4(d.pop("last4", UNSET))


        set_payment_method_body = cls(
            exp_month=exp_month,
            exp_year=exp_year,
            payment_method_ref=payment_method_ref,
            provider=provider,
            brand=brand,
            customer_ref=customer_ref,
            last4=last4,
        )

        return set_payment_method_body

