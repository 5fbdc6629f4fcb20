from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.subscription_status import SubscriptionStatus
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, Union, cast
from typing import Union
import datetime






T = TypeVar("T", bound="ListSubscriptionsResponse200DataItem")



@_attrs_define
class ListSubscriptionsResponse200DataItem:
    """ 
        Attributes:
            cancel_at_period_end (bool):
            current_period_end (datetime.datetime):
            current_period_start (datetime.datetime):
            customer_id (int):
            id (int):
            plan_code (str):
            status (SubscriptionStatus):
            version (int):
            coupon_code (Union[None, Unset, str]):
            external_id (Union[None, Unset, str]): Your own id of the subscription (unique)
            paused_at (Union[None, Unset, datetime.datetime]):
            quantity (Union[Unset, int]):
            resume_at (Union[None, Unset, datetime.datetime]):
            scheduled_plan_code (Union[None, Unset, str]):
            trial_end (Union[None, Unset, datetime.datetime]):
            object_ (Union[Literal['subscription'], Unset]):
     """

    cancel_at_period_end: bool
    current_period_end: datetime.datetime
    current_period_start: datetime.datetime
    customer_id: int
    id: int
    plan_code: str
    status: SubscriptionStatus
    version: int
    coupon_code: Union[None, Unset, str] = UNSET
    external_id: Union[None, Unset, str] = UNSET
    paused_at: Union[None, Unset, datetime.datetime] = UNSET
    quantity: Union[Unset, int] = UNSET
    resume_at: Union[None, Unset, datetime.datetime] = UNSET
    scheduled_plan_code: Union[None, Unset, str] = UNSET
    trial_end: Union[None, Unset, datetime.datetime] = UNSET
    object_: Union[Literal['subscription'], Unset] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        cancel_at_period_end = self.cancel_at_period_end

        current_period_end = self.current_period_end.isoformat()

        current_period_start = self.current_period_start.isoformat()

        customer_id = self.customer_id

        id = self.id

        plan_code = self.plan_code

        status = self.status.value

        version = self.version

        coupon_code: Union[None, Unset, str]
        if isinstance(self.coupon_code, Unset):
            coupon_code = UNSET
        else:
            coupon_code = self.coupon_code

        external_id: Union[None, Unset, str]
        if isinstance(self.external_id, Unset):
            external_id = UNSET
        else:
            external_id = self.external_id

        paused_at: Union[None, Unset, str]
        if isinstance(self.paused_at, Unset):
            paused_at = UNSET
        elif isinstance(self.paused_at, datetime.datetime):
            paused_at = self.paused_at.isoformat()
        else:
            paused_at = self.paused_at

        quantity = self.quantity

        resume_at: Union[None, Unset, str]
        if isinstance(self.resume_at, Unset):
            resume_at = UNSET
        elif isinstance(self.resume_at, datetime.datetime):
            resume_at = self.resume_at.isoformat()
        else:
            resume_at = self.resume_at

        scheduled_plan_code: Union[None, Unset, str]
        if isinstance(self.scheduled_plan_code, Unset):
            scheduled_plan_code = UNSET
        else:
            scheduled_plan_code = self.scheduled_plan_code

        trial_end: Union[None, Unset, str]
        if isinstance(self.trial_end, Unset):
            trial_end = UNSET
        elif isinstance(self.trial_end, datetime.datetime):
            trial_end = self.trial_end.isoformat()
        else:
            trial_end = self.trial_end

        object_ = self.object_


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "cancelAtPeriodEnd": cancel_at_period_end,
            "currentPeriodEnd": current_period_end,
            "currentPeriodStart": current_period_start,
            "customerId": customer_id,
            "id": id,
            "planCode": plan_code,
            "status": status,
            "version": version,
        })
        if coupon_code is not UNSET:
            field_dict["couponCode"] = coupon_code
        if external_id is not UNSET:
            field_dict["externalId"] = external_id
        if paused_at is not UNSET:
            field_dict["pausedAt"] = paused_at
        if quantity is not UNSET:
            field_dict["quantity"] = quantity
        if resume_at is not UNSET:
            field_dict["resumeAt"] = resume_at
        if scheduled_plan_code is not UNSET:
            field_dict["scheduledPlanCode"] = scheduled_plan_code
        if trial_end is not UNSET:
            field_dict["trialEnd"] = trial_end
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        cancel_at_period_end = d.pop("cancelAtPeriodEnd")

        current_period_end = isoparse(d.pop("currentPeriodEnd"))




        current_period_start = isoparse(d.pop("currentPeriodStart"))




        customer_id = d.pop("customerId")

        id = d.pop("id")

        plan_code = d.pop("planCode")

        status = SubscriptionStatus(d.pop("status"))




        version = d.pop("version")

        def _parse_coupon_code(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        coupon_code = _parse_coupon_code(d.pop("couponCode", UNSET))


        def _parse_external_id(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        external_id = _parse_external_id(d.pop("externalId", UNSET))


        def _parse_paused_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                paused_at_type_0 = isoparse(data)



                return paused_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        paused_at = _parse_paused_at(d.pop("pausedAt", UNSET))


        quantity = d.pop("quantity", UNSET)

        def _parse_resume_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                resume_at_type_0 = isoparse(data)



                return resume_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        resume_at = _parse_resume_at(d.pop("resumeAt", UNSET))


        def _parse_scheduled_plan_code(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        scheduled_plan_code = _parse_scheduled_plan_code(d.pop("scheduledPlanCode", UNSET))


        def _parse_trial_end(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                trial_end_type_0 = isoparse(data)



                return trial_end_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        trial_end = _parse_trial_end(d.pop("trialEnd", UNSET))


        object_ = cast(Union[Literal['subscription'], Unset] , d.pop("object", UNSET))
        if object_ != 'subscription'and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'subscription', got '{object_}'")

        list_subscriptions_response_200_data_item = cls(
            cancel_at_period_end=cancel_at_period_end,
            current_period_end=current_period_end,
            current_period_start=current_period_start,
            customer_id=customer_id,
            id=id,
            plan_code=plan_code,
            status=status,
            version=version,
            coupon_code=coupon_code,
            external_id=external_id,
            paused_at=paused_at,
            quantity=quantity,
            resume_at=resume_at,
            scheduled_plan_code=scheduled_plan_code,
            trial_end=trial_end,
            object_=object_,
        )


        list_subscriptions_response_200_data_item.additional_properties = d
        return list_subscriptions_response_200_data_item

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
