from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="CancelSubscriptionBody")



@_attrs_define
class CancelSubscriptionBody:
    """ 
        Attributes:
            at_period_end (bool):
     """

    at_period_end: bool





    def to_dict(self) -> dict[str, Any]:
        at_period_end = self.at_period_end


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "atPeriodEnd": at_period_end,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        at_period_end = d.pop("atPeriodEnd")

        cancel_subscription_body = cls(
            at_period_end=at_period_end,
        )

        return cancel_subscription_body

