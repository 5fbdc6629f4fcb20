from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="ApplyCouponBody")



@_attrs_define
class ApplyCouponBody:
    """ 
        Attributes:
            coupon_code (str):
     """

    coupon_code: str





    def to_dict(self) -> dict[str, Any]:
        coupon_code = self.coupon_code


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "couponCode": coupon_code,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        coupon_code = d.pop("couponCode")

        apply_coupon_body = cls(
            coupon_code=coupon_code,
        )

        return apply_coupon_body

