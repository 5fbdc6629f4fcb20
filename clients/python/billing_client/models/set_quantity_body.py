from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="SetQuantityBody")



@_attrs_define
class SetQuantityBody:
    """ 
        Attributes:
            quantity (int):
     """

    quantity: int





    def to_dict(self) -> dict[str, Any]:
        quantity = self.quantity


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "quantity": quantity,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        quantity = d.pop("quantity")

        set_quantity_body = cls(
            quantity=quantity,
        )

        return set_quantity_body

