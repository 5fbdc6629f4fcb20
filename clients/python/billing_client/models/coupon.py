from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.coupon_duration import CouponDuration
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="Coupon")



@_attrs_define
class Coupon:
    """ 
        Attributes:
            code (str):
            duration (CouponDuration):
            object_ (Literal['coupon']):
            times_redeemed (int):
            amount_off (Union[None, Unset, int]):
            archived_at (Union[None, Unset, datetime.datetime]): When it was archived: no new redemption (null: redeemable)
            currency (Union[None, Unset, str]):
            duration_periods (Union[None, Unset, int]):
            max_redemptions (Union[None, Unset, int]):
            max_redemptions_per_customer (Union[None, Unset, int]): At most this many redemptions by one customer, replaced
                or ended ones too (null: no limit)
            percent_off (Union[None, Unset, float]):
            plan_codes (Union[None, Unset, list[str]]):
            redeem_by (Union[None, Unset, datetime.datetime]):
     """

    code: str
    duration: CouponDuration
    object_: Literal['coupon']
    times_redeemed: int
    amount_off: Union[None, Unset, int] = UNSET
    archived_at: Union[None, Unset, datetime.datetime] = UNSET
    currency: Union[None, Unset, str] = UNSET
    duration_periods: Union[None, Unset, int] = UNSET
    max_redemptions: Union[None, Unset, int] = UNSET
    max_redemptions_per_customer: Union[None, Unset, int] = UNSET
    percent_off: Union[None, Unset, float] = UNSET
    plan_codes: Union[None, Unset, list[str]] = UNSET
    redeem_by: Union[None, Unset, datetime.datetime] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        code = self.code

        duration = self.duration.value

        object_ = self.object_

        times_redeemed = self.times_redeemed

        amount_off: Union[None, Unset, int]
        if isinstance(self.amount_off, Unset):
            amount_off = UNSET
        else:
            amount_off = self.amount_off

        archived_at: Union[None, Unset, str]
        if isinstance(self.archived_at, Unset):
            archived_at = UNSET
        elif isinstance(self.archived_at, datetime.datetime):
            archived_at = self.archived_at.isoformat()
        else:
            archived_at = self.archived_at

        currency: Union[None, Unset, str]
        if isinstance(self.currency, Unset):
            currency = UNSET
        else:
            currency = self.currency

        duration_periods: Union[None, Unset, int]
        if isinstance(self.duration_periods, Unset):
            duration_periods = UNSET
        else:
            duration_periods = self.duration_periods

        max_redemptions: Union[None, Unset, int]
        if isinstance(self.max_redemptions, Unset):
            max_redemptions = UNSET
        else:
            max_redemptions = self.max_redemptions

        max_redemptions_per_customer: Union[None, Unset, int]
        if isinstance(self.max_redemptions_per_customer, Unset):
            max_redemptions_per_customer = UNSET
        else:
            max_redemptions_per_customer = self.max_redemptions_per_customer

        percent_off: Union[None, Unset, float]
        if isinstance(self.percent_off, Unset):
            percent_off = UNSET
        else:
            percent_off = self.percent_off

        plan_codes: Union[None, Unset, list[str]]
        if isinstance(self.plan_codes, Unset):
            plan_codes = UNSET
        elif isinstance(self.plan_codes, list):
            plan_codes = self.plan_codes


        else:
            plan_codes = self.plan_codes

        redeem_by: Union[None, Unset, str]
        if isinstance(self.redeem_by, Unset):
            redeem_by = UNSET
        elif isinstance(self.redeem_by, datetime.datetime):
            redeem_by = self.redeem_by.isoformat()
        else:
            redeem_by = self.redeem_by


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "code": code,
            "duration": duration,
            "object": object_,
            "timesRedeemed": times_redeemed,
        })
        if amount_off is not UNSET:
            field_dict["amountOff"] = amount_off
        if archived_at is not UNSET:
            field_dict["archivedAt"] = archived_at
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

        duration = CouponDuration(d.pop("duration"))




        object_ = cast(Literal['coupon'] , d.pop("object"))
        if object_ != 'coupon':
            raise ValueError(f"object must match const 'coupon', got '{object_}'")

        times_redeemed = d.pop("timesRedeemed")

        def _parse_amount_off(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        amount_off = _parse_amount_off(d.pop("amountOff", UNSET))


        def _parse_archived_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                archived_at_type_0 = isoparse(data)



                return archived_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        archived_at = _parse_archived_at(d.pop("archivedAt", UNSET))


        def _parse_currency(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        currency = _parse_currency(d.pop("currency", UNSET))


        def _parse_duration_periods(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        duration_periods = _parse_duration_periods(d.pop("durationPeriods", UNSET))


        def _parse_max_redemptions(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        max_redemptions = _parse_max_redemptions(d.pop("maxRedemptions", UNSET))


        def _parse_max_redemptions_per_customer(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        max_redemptions_per_customer = _parse_max_redemptions_per_customer(d.pop("maxRedemptionsPerCustomer", UNSET))


        def _parse_percent_off(data: object) -> Union[None, Unset, float]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, float], data)

        percent_off = _parse_percent_off(d.pop("percentOff", UNSET))


        def _parse_plan_codes(data: object) -> Union[None, Unset, list[str]]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                plan_codes_type_0 = cast(list[str], data)

                return plan_codes_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, list[str]], data)

        plan_codes = _parse_plan_codes(d.pop("planCodes", UNSET))


        def _parse_redeem_by(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                redeem_by_type_0 = isoparse(data)



                return redeem_by_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        redeem_by = _parse_redeem_by(d.pop("redeemBy", UNSET))


        coupon = cls(
            code=code,
            duration=duration,
            object_=object_,
            times_redeemed=times_redeemed,
            amount_off=amount_off,
            archived_at=archived_at,
            currency=currency,
            duration_periods=duration_periods,
            max_redemptions=max_redemptions,
            max_redemptions_per_customer=max_redemptions_per_customer,
            percent_off=percent_off,
            plan_codes=plan_codes,
            redeem_by=redeem_by,
        )


        coupon.additional_properties = d
        return coupon

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
