from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import Union






T = TypeVar("T", bound="OpenCustomerSessionBody")



@_attrs_define
class OpenCustomerSessionBody:
    """ 
        Attributes:
            customer_id (int):
            ttl_seconds (Union[Unset, int]):
     """

    customer_id: int
    ttl_seconds: Union[Unset, int] = UNSET





    def to_dict(self) -> dict[str, Any]:
        customer_id = self.customer_id

        ttl_seconds = self.ttl_seconds


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "customerId": customer_id,
        })
        if ttl_seconds is not UNSET:
            field_dict["ttlSeconds"] = ttl_seconds

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        customer_id = d.pop("customerId")

        ttl_seconds = d.pop("ttlSeconds", UNSET)

        open_customer_session_body = cls(
            customer_id=customer_id,
            ttl_seconds=ttl_seconds,
        )

        return open_customer_session_body

