from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import Union






T = TypeVar("T", bound="CreateSubscriptionsBodySignupsItem")



@_attrs_define
class CreateSubscriptionsBodySignupsItem:
    """ 
        Attributes:
            customer_id (int):
            idempotency_key (str):
            plan_code (str):
            coupon_code (Union[Unset, str]):
            external_id (Union[Unset, str]):
            quantity (Union[Unset, int]):
            trial_days (Union[Unset, int]):
     """

    customer_id: int
    idempotency_key: str
    plan_code: str
    coupon_code: Union[Unset, str] = UNSET
    external_id: Union[Unset, str] = UNSET
    quantity: Union[Unset, int] = UNSET
    trial_days: Union[Unset, int] = UNSET





    def to_dict(self) -> dict[str, Any]:
        customer_id = self.customer_id

        idempotency_key = self.idempotency_key

        plan_code = self.plan_code

        coupon_code = self.coupon_code

        external_id = self.external_id

        quantity = self.quantity

        trial_days = self.trial_days


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "customerId": customer_id,
            "idempotencyKey": idempotency_key,
            "planCode": plan_code,
        })
        if coupon_code is not UNSET:
            field_dict["couponCode"] = coupon_code
        if external_id is not UNSET:
            field_dict["externalId"] = external_id
        if quantity is not UNSET:
            field_dict["quantity"] = quantity
        if trial_days is not UNSET:
            field_dict["trialDays"] = trial_days

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        customer_id = d.pop("customerId")

        idempotency_key = d.pop("idempotencyKey")

        plan_code = d.pop("planCode")

        coupon_code = d.pop("couponCode", UNSET)

        external_id = d.pop("externalId", UNSET)

        quantity = d.pop("quantity", UNSET)

        trial_days = d.pop("trialDays", UNSET)

        create_subscriptions_body_signups_item = cls(
            customer_id=customer_id,
            idempotency_key=idempotency_key,
            plan_code=plan_code,
            coupon_code=coupon_code,
            external_id=external_id,
            quantity=quantity,
            trial_days=trial_days,
        )

        return create_subscriptions_body_signups_item

