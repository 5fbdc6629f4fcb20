from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.stripe_webhook_body_data import StripeWebhookBodyData





T = TypeVar("T", bound="StripeWebhookBody")



@_attrs_define
class StripeWebhookBody:
    """ 
        Attributes:
            data (StripeWebhookBodyData):
            id (str):
            type_ (str):
     """

    data: 'StripeWebhookBodyData'
    id: str
    type_: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.stripe_webhook_body_data import StripeWebhookBodyData
        data = self.data.to_dict()

        id = self.id

        type_ = self.type_


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "data": data,
            "id": id,
            "type": type_,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.stripe_webhook_body_data import StripeWebhookBodyData
        d = dict(src_dict)
        data = StripeWebhookBodyData.from_dict(d.pop("data"))




        id = d.pop("id")

        type_ = d.pop("type")

        stripe_webhook_body = cls(
            data=data,
            id=id,
            type_=type_,
        )


        stripe_webhook_body.additional_properties = d
        return stripe_webhook_body

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
