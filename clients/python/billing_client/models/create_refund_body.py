from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="CreateRefundBody")



@_attrs_define
class CreateRefundBody:
    """ 
        Attributes:
            amount (int):
     """

    amount: int





    def to_dict(self) -> dict[str, Any]:
        amount = self.amount


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "amount": amount,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        amount = d.pop("amount")

        create_refund_body = cls(
            amount=amount,
        )

        return create_refund_body

