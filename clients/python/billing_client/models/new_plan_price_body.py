from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import Union
import datetime






T = TypeVar("T", bound="NewPlanPriceBody")



@_attrs_define
class NewPlanPriceBody:
    """ 
        Attributes:
            price_amount (int):
            effective_from (Union[Unset, datetime.datetime]):
     """

    price_amount: int
    effective_from: Union[Unset, datetime.datetime] = UNSET





    def to_dict(self) -> dict[str, Any]:
        price_amount = self.price_amount

        effective_from: Union[Unset, str] = UNSET
        if not isinstance(self.effective_from, Unset):
            effective_from = self.effective_from.isoformat()


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "priceAmount": price_amount,
        })
        if effective_from is not UNSET:
            field_dict["effectiveFrom"] = effective_from

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        price_amount = d.pop("priceAmount")

        _effective_from = d.pop("effectiveFrom", UNSET)
        effective_from: Union[Unset, datetime.datetime]
        if isinstance(_effective_from,  Unset):
            effective_from = UNSET
        else:
            effective_from = isoparse(_effective_from)




        new_plan_price_body = cls(
            price_amount=price_amount,
            effective_from=effective_from,
        )

        return new_plan_price_body

