from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.upsert_coupon_body_duration import UpsertCouponBodyDuration
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import Union
import datetime






T = TypeVar("T", bound="UpsertCouponBody")



@_attrs_define
class UpsertCouponBody:
    """ 
        Attributes:
            code (str):
            duration (UpsertCouponBodyDuration):
            amount_off (Union[Unset, int]):
            currency (Union[Unset, str]):
            duration_periods (Union[Unset, int]):
            max_redemptions (Union[Unset, int]):
            max_redemptions_per_customer (Union[Unset, int]):
            percent_off (Union[Unset, float]):
            plan_codes (Union[Unset, list[str]]):
            redeem_by (Union[Unset, datetime.datetime]):
     """

    code: str
    duration: UpsertCouponBodyDuration
    amount_off: Union[Unset, int] = UNSET
    currency: Union[Unset, str] = UNSET
    duration_periods: Union[Unset, int] = UNSET
    max_redemptions: Union[Unset, int] = UNSET
    max_redemptions_per_customer: Union[Unset, int] = UNSET
    percent_off: Union[Unset, float] = UNSET
    plan_codes: Union[Unset, list[str]] = UNSET
    redeem_by: Union[Unset, datetime.datetime] = UNSET





    def to_dict(self) -> dict[str, Any]:
        code = self.code

        duration = self.duration.value

        amount_off = self.amount_off

        currency = self.currency

        duration_periods = self.duration_periods

        max_redemptions = self.max_redemptions

        max_redemptions_per_customer = self.max_redemptions_per_customer

        percent_off = self.percent_off

        plan_codes: Union[Unset, list[str]] = UNSET
        if not isinstance(self.plan_codes, Unset):
            plan_codes = self.plan_codes



        redeem_by: Union[Unset, str] = UNSET
        if not isinstance(self.redeem_by, Unset):
            redeem_by = self.redeem_by.isoformat()


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "code": code,
            "duration": duration,
        })
        if amount_off is not UNSET:
            field_dict["amountOff"] = amount_off
        if currency is not UNSET:
            field_dict["currency"] = currency
        if duration_periods is not UNSET:
            field_dict["durationPeriods"] = duration_periods
        if max_redemptions is not UNSET:
            field_dict["maxRedemptions"] = max_redemptions
        if max_redemptions_per_customer is not UNSET:
            field_dict["maxRedemptionsPerCustomer"] = max_redemptions_per_customer
        if percent_off is not UNSET:
            field_dict["percentOff"] = percent_off
        if plan_codes is not UNSET:
            field_dict["planCodes"] = plan_codes
        if redeem_by is not UNSET:
            field_dict["redeemBy"] = redeem_by

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        code = d.pop("code")

        duration = UpsertCouponBodyDuration(d.pop("duration"))




        amount_off = d.pop("amountOff", UNSET)

        currency = d.pop("currency", UNSET)

        duration_periods = d.pop("durationPeriods", UNSET)

        max_redemptions = d.pop("maxRedemptions", UNSET)

        max_redemptions_per_customer = d.pop("maxRedemptionsPerCustomer", UNSET)

        percent_off = d.pop("percentOff", UNSET)

        plan_codes = cast(list[str], d.pop("planCodes", UNSET))


        _redeem_by = d.pop("redeemBy", UNSET)
        redeem_by: Union[Unset, datetime.datetime]
        if isinstance(_redeem_by,  Unset):
            redeem_by = UNSET
        else:
            redeem_by = isoparse(_redeem_by)




        upsert_coupon_body = cls(
            code=code,
            duration=duration,
            amount_off=amount_off,
            currency=currency,
            duration_periods=duration_periods,
            max_redemptions=max_redemptions,
            max_redemptions_per_customer=max_redemptions_per_customer,
            percent_off=percent_off,
            plan_codes=plan_codes,
            redeem_by=redeem_by,
        )

        return upsert_coupon_body

