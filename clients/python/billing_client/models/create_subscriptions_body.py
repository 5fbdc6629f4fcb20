from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.create_subscriptions_body_signups_item import CreateSubscriptionsBodySignupsItem





T = TypeVar("T", bound="CreateSubscriptionsBody")



@_attrs_define
class CreateSubscriptionsBody:
    """ 
        Attributes:
            signups (list['CreateSubscriptionsBodySignupsItem']):
     """

    signups: list['CreateSubscriptionsBodySignupsItem']





    def to_dict(self) -> dict[str, Any]:
        from ..models.create_subscriptions_body_signups_item import CreateSubscriptionsBodySignupsItem
        signups = []
        for signups_item_data in self.signups:
            signups_item = signups_item_data.to_dict()
            signups.append(signups_item)




        field_dict: dict[str, Any] = {}

        field_dict.update({
            "signups": signups,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.create_subscriptions_body_signups_item import CreateSubscriptionsBodySignupsItem
        d = dict(src_dict)
        signups = []
        _signups = d.pop("signups")
        for signups_item_data in (_signups):
            signups_item = CreateSubscriptionsBodySignupsItem.from_dict(signups_item_data)



            signups.append(signups_item)


        create_subscriptions_body = cls(
            signups=signups,
        )

        return create_subscriptions_body

