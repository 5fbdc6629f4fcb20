from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.create_plan_body_billing_interval import CreatePlanBodyBillingInterval
from ..types import UNSET, Unset
from typing import Union






T = TypeVar("T", bound="CreatePlanBody")



@_attrs_define
class CreatePlanBody:
    """ 
        Attributes:
            billing_interval (CreatePlanBodyBillingInterval):
            code (str):
            currency (str):
            price_amount (int):
            billing_day (Union[Unset, int]):
            external_id (Union[Unset, str]):
            interval_count (Union[Unset, int]):
            self_serve (Union[Unset, bool]): Customers may sign up to it themselves with a customer session (default false)
     """

    billing_interval: CreatePlanBodyBillingInterval
    code: str
    currency: str
    price_amount: int
    billing_day: Union[Unset, int] = UNSET
    external_id: Union[Unset, str] = UNSET
    interval_count: Union[Unset, int] = UNSET
    self_serve: Union[Unset, bool] = UNSET





    def to_dict(self) -> dict[str, Any]:
        billing_interval = self.billing_interval.value

        code = self.code

        currency = self.currency

        price_amount = self.price_amount

        billing_day = self.billing_day

        external_id = self.external_id

        interval_count = self.interval_count

        self_serve = self.self_serve


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "billingInterval": billing_interval,
            "code": code,
            "currency": currency,
            "priceAmount": price_amount,
        })
        if billing_day is not UNSET:
            field_dict["billingDay"] = billing_day
        if external_id is not UNSET:
            field_dict["externalId"] = external_id
        if interval_count is not UNSET:
            field_dict["intervalCount"] = interval_count
        if self_serve is not UNSET:
            field_dict["selfServe"] = self_serve

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        billing_interval = CreatePlanBodyBillingInterval(d.pop("billingInterval"))




        code = d.pop("code")

        currency = d.pop("currency")

        price_amount = d.pop("priceAmount")

        billing_day = d.pop("billingDay", UNSET)

        external_id = d.pop("externalId", UNSET)

        interval_count = d.pop("intervalCount", UNSET)

        self_serve = d.pop("selfServe", UNSET)

        create_plan_body = cls(
            billing_interval=billing_interval,
            code=code,
            currency=currency,
            price_amount=price_amount,
            billing_day=billing_day,
            external_id=external_id,
            interval_count=interval_count,
            self_serve=self_serve,
        )

        return create_plan_body

