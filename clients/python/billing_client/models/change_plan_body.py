from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.change_plan_body_when import ChangePlanBodyWhen
from ..types import UNSET, Unset
from typing import Union






T = TypeVar("T", bound="ChangePlanBody")



@_attrs_define
class ChangePlanBody:
    """ 
        Attributes:
            plan_code (str):
            prorate (Union[Unset, bool]):
            when (Union[Unset, ChangePlanBodyWhen]):
     """

    plan_code: str
    prorate: Union[Unset, bool] = UNSET
    when: Union[Unset, ChangePlanBodyWhen] = UNSET





    def to_dict(self) -> dict[str, Any]:
        plan_code = self.plan_code

        prorate = self.prorate

        when: Union[Unset, str] = UNSET
        if not isinstance(self.when, Unset):
            when = self.when.value



        field_dict: dict[str, Any] = {}

        field_dict.update({
            "planCode": plan_code,
        })
        if prorate is not UNSET:
            field_dict["prorate"] = prorate
        if when is not UNSET:
            field_dict["when"] = when

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        plan_code = d.pop("planCode")

        prorate = d.pop("prorate", UNSET)

        _when = d.pop("when", UNSET)
        when: Union[Unset, ChangePlanBodyWhen]
        if isinstance(_when,  Unset):
            when = UNSET
        else:
            when = ChangePlanBodyWhen(_when)




        change_plan_body = cls(
            plan_code=plan_code,
            prorate=prorate,
            when=when,
        )

        return change_plan_body

