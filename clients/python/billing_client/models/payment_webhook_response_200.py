from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import Union






T = TypeVar("T", bound="PaymentWebhookResponse200")



@_attrs_define
class PaymentWebhookResponse200:
    """ 
        Attributes:
            applied (Union[Unset, bool]):
            duplicate (Union[Unset, bool]):
            received (Union[Unset, bool]):
     """

    applied: Union[Unset, bool] = UNSET
    duplicate: Union[Unset, bool] = UNSET
    received: Union[Unset, bool] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        applied = self.applied

        duplicate = self.duplicate

        received = self.received


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if applied is not UNSET:
            field_dict["applied"] = applied
        if duplicate is not UNSET:
            field_dict["duplicate"] = duplicate
        if received is not UNSET:
            field_dict["received"] = received

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        applied = d.pop("applied", UNSET)

        duplicate = d.pop("duplicate", UNSET)

        received = d.pop("received", UNSET)

        payment_webhook_response_200 = cls(
            applied=applied,
            duplicate=duplicate,
            received=received,
        )


        payment_webhook_response_200.additional_properties = d
        return payment_webhook_response_200

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
