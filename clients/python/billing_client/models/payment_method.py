from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.payment_method_status import PaymentMethodStatus
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="PaymentMethod")



@_attrs_define
class PaymentMethod:
    """ 
        Attributes:
            customer_id (int):
            exp_month (Union[None, int]):
            exp_year (Union[None, int]):
            id (int):
            is_default (bool):
            object_ (Literal['payment_method']):
            payment_method_ref (Union[None, str]): null (as brand, last4, expMonth, expYear, customerRef) for a key without
                customers:read or admin
            provider (str):
            status (PaymentMethodStatus):
            brand (Union[None, Unset, str]):
            customer_ref (Union[None, Unset, str]):
            last4 (Union[None, Unset, str]):
            updated_at (Union[Unset, datetime.datetime]):
     """

    customer_id: int
    exp_month: Union[None, int]
    exp_year: Union[None, int]
    id: int
    is_default: bool
    object_: Literal['payment_method']
    payment_method_ref: Union[None, str]
    provider: str
    status: PaymentMethodStatus
    brand: Union[None, Unset, str] = UNSET
    customer_ref: Union[None, Unset, str] = UNSET
    last4: Union[None, Unset, str] = UNSET
    updated_at: Union[Unset, datetime.datetime] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        customer_id = self.customer_id

        exp_month: Union[None, int]
        exp_month = self.exp_month

        exp_year: Union[None, int]
        exp_year = self.exp_year

        id = self.id

        is_default = self.is_default

        object_ = self.object_

        payment_method_ref: Union[None, str]
        payment_method_ref = self.payment_method_ref

        provider = self.provider

        status = self.status.value

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

        updated_at: Union[Unset, str] = UNSET
        if not isinstance(self.updated_at, Unset):
            updated_at = self.updated_at.isoformat()


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "customerId": customer_id,
            "expMonth": exp_month,
            "expYear": exp_year,
            "id": id,
            "isDefault": is_default,
            "object": object_,
            "paymentMethodRef": payment_method_ref,
            "provider": provider,
            "status": status,
        })
        if brand is not UNSET:
            field_dict["brand"] = brand
        if customer_ref is not UNSET:
            field_dict["customerRef"] = customer_ref
        if last4 is not UNSET:
            field_dict["last4"] = last4
        if updated_at is not UNSET:
            field_dict["updatedAt"] = updated_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        customer_id = d.pop("customerId")

        def _parse_exp_month(data: object) -> Union[None, int]:
            if data is None:
                return data
            return cast(Union[None, int], data)

        exp_month = _parse_exp_month(d.pop("expMonth"))


        def _parse_exp_year(data: object) -> Union[None, int]:
            if data is None:
                return data
            return cast(Union[None, int], data)

        exp_year = _parse_exp_year(d.pop("expYear"))


        id = d.pop("id")

        is_default = d.pop("isDefault")

        object_ = cast(Literal['payment_method'] , d.pop("object"))
        if object_ != 'payment_method':
            raise ValueError(f"object must match const 'payment_method', got '{object_}'")

        def _parse_payment_method_ref(data: object) -> Union[None, str]:
            if data is None:
                return data
            return cast(Union[None, str], data)

        payment_method_ref = _parse_payment_method_ref(d.pop("paymentMethodRef"))


        provider = d.pop("provider")

        status = PaymentMethodStatus(d.pop("status"))




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


        _updated_at = d.pop("updatedAt", UNSET)
        updated_at: Union[Unset, datetime.datetime]
        if isinstance(_updated_at,  Unset):
            updated_at = UNSET
        else:
            updated_at = isoparse(_updated_at)




        payment_method = cls(
            customer_id=customer_id,
            exp_month=exp_month,
            exp_year=exp_year,
            id=id,
            is_default=is_default,
            object_=object_,
            payment_method_ref=payment_method_ref,
            provider=provider,
            status=status,
            brand=brand,
            customer_ref=customer_ref,
            last4=last4,
            updated_at=updated_at,
        )


        payment_method.additional_properties = d
        return payment_method

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
