from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="CreateUsageAlertBody")



@_attrs_define
class CreateUsageAlertBody:
    """ 
        Attributes:
            meter_code (str):
            threshold (float): The meter's value in the customer's open period that fires UsageThresholdReached
     """

    meter_code: str
    threshold: float





    def to_dict(self) -> dict[str, Any]:
        meter_code = self.meter_code

        threshold = self.threshold


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "meterCode": meter_code,
            "threshold": threshold,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        meter_code = d.pop("meterCode")

        threshold = d.pop("threshold")

        create_usage_alert_body = cls(
            meter_code=meter_code,
            threshold=threshold,
        )

        return create_usage_alert_body

