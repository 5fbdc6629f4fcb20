from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.create_subscriptions_response_200_data_item_outcome import CreateSubscriptionsResponse200DataItemOutcome
from typing import Literal, cast






T = TypeVar("T", bound="CreateSubscriptionsResponse200DataItem")



@_attrs_define
class CreateSubscriptionsResponse200DataItem:
    """ 
        Attributes:
            customer_id (int):
            idempotency_key (str):
            object_ (Literal['signup']):
            outcome (CreateSubscriptionsResponse200DataItemOutcome):
            subscription_id (int):
     """

    customer_id: int
    idempotency_key: str
    object_: Literal['signup']
    outcome: CreateSubscriptionsResponse200DataItemOutcome
    subscription_id: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        customer_id = self.customer_id

        idempotency_key = self.idempotency_key

        object_ = self.object_

        outcome = self.outcome.value

        subscription_id = self.subscription_id


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "customerId": customer_id,
            "idempotencyKey": idempotency_key,
            "object": object_,
            "outcome": outcome,
            "subscriptionId": subscription_id,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        customer_id = d.pop("customerId")

        idempotency_key = d.pop("idempotencyKey")

        object_ = cast(Literal['signup'] , d.pop("object"))
        if object_ != 'signup':
            raise ValueError(f"object must match const 'signup', got '{object_}'")

        outcome = CreateSubscriptionsResponse200DataItemOutcome(d.pop("outcome"))




        subscription_id = d.pop("subscriptionId")

        create_subscriptions_response_200_data_item = cls(
            customer_id=customer_id,
            idempotency_key=idempotency_key,
            object_=object_,
            outcome=outcome,
            subscription_id=subscription_id,
        )


        create_subscriptions_response_200_data_item.additional_properties = d
        return create_subscriptions_response_200_data_item

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
