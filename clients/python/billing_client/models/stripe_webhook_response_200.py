from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from typing import Union






T = TypeVar("T", bound="StripeWebhookResponse200")



@_attrs_define
class StripeWebhookResponse200:
    """ 
        Attributes:
            outcomes (Union[Unset, list[str]]):
            received (Union[Unset, bool]):
     """

    outcomes: Union[Unset, list[str]] = UNSET
    received: Union[Unset, bool] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        outcomes: Union[Unset, list[str]] = UNSET
        if not isinstance(self.outcomes, Unset):
            outcomes = self.outcomes



        received = self.received


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if outcomes is not UNSET:
            field_dict["outcomes"] = outcomes
        if received is not UNSET:
            field_dict["received"] = received

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        outcomes = cast(list[str], d.pop("outcomes", UNSET))


        received = d.pop("received", UNSET)

        stripe_webhook_response_200 = cls(
            outcomes=outcomes,
            received=received,
        )


        stripe_webhook_response_200.additional_properties = d
        return stripe_webhook_response_200

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
