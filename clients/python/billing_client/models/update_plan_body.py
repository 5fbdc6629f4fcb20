from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="UpdatePlanBody")



@_attrs_define
class UpdatePlanBody:
    """ 
        Attributes:
            self_serve (bool):
     """

    self_serve: bool





    def to_dict(self) -> dict[str, Any]:
        self_serve = self.self_serve


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "selfServe": self_serve,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        self_serve = d.pop("selfServe")

        update_plan_body = cls(
            self_serve=self_serve,
        )

        return update_plan_body

