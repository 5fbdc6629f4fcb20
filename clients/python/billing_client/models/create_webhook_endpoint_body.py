from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from typing import Union






T = TypeVar("T", bound="CreateWebhookEndpointBody")



@_attrs_define
class CreateWebhookEndpointBody:
    """ 
        Attributes:
            event_types (list[str]):
            url (str):
            secret (Union[Unset, str]):
     """

    event_types: list[str]
    url: str
    secret: Union[Unset, str] = UNSET





    def to_dict(self) -> dict[str, Any]:
        event_types = self.event_types



        url = self.url

        secret = self.secret


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "eventTypes": event_types,
            "url": url,
        })
        if secret is not UNSET:
            field_dict["secret"] = secret

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        event_types = cast(list[str], d.pop("eventTypes"))


        url = d.pop("url")

        secret = d.pop("secret", UNSET)

        create_webhook_endpoint_body = cls(
            event_types=event_types,
            url=url,
            secret=secret,
        )

        return create_webhook_endpoint_body

