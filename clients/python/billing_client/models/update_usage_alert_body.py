from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="UpdateUsageAlertBody")



@_attrs_define
class UpdateUsageAlertBody:
    """ 
        Attributes:
            threshold (float): The meter's value in the customer's open period that fires UsageThresholdReached
     """

    threshold: float





    def to_dict(self) -> dict[str, Any]:
        threshold = self.threshold


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "threshold": threshold,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        threshold = d.pop("threshold")

        update_usage_alert_body = cls(
            threshold=threshold,
        )

        return update_usage_alert_body

