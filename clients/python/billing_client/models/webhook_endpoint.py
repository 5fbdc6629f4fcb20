from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.webhook_endpoint_status import WebhookEndpointStatus
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="WebhookEndpoint")



@_attrs_define
class WebhookEndpoint:
    """ 
        Attributes:
            created_at (datetime.datetime):
            event_types (list[str]):
            id (int):
            object_ (Literal['webhook_endpoint']):
            status (WebhookEndpointStatus):
            url (str):
            disabled_at (Union[None, Unset, datetime.datetime]):
            disabled_reason (Union[None, Unset, str]):
            secret (Union[Unset, str]):
     """

    created_at: datetime.datetime
    event_types: list[str]
    id: int
    object_: Literal['webhook_endpoint']
    status: WebhookEndpointStatus
    url: str
    disabled_at: Union[None, Unset, datetime.datetime] = UNSET
    disabled_reason: Union[None, Unset, str] = UNSET
    secret: Union[Unset, str] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        created_at = self.created_at.isoformat()

        event_types = self.event_types



        id = self.id

        object_ = self.object_

        status = self.status.value

        url = self.url

        disabled_at: Union[None, Unset, str]
        if isinstance(self.disabled_at, Unset):
            disabled_at = UNSET
        elif isinstance(self.disabled_at, datetime.datetime):
            disabled_at = self.disabled_at.isoformat()
        else:
            disabled_at = self.disabled_at

        disabled_reason: Union[None, Unset, str]
        if isinstance(self.disabled_reason, Unset):
            disabled_reason = UNSET
        else:
            disabled_reason = self.disabled_reason

        secret = self.secret


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "createdAt": created_at,
            "eventTypes": event_types,
            "id": id,
            "object": object_,
            "status": status,
            "url": url,
        })
        if disabled_at is not UNSET:
            field_dict["disabledAt"] = disabled_at
        if disabled_reason is not UNSET:
            field_dict["disabledReason"] = disabled_reason
        if secret is not UNSET:
            field_dict["secret"] = secret

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        created_at = isoparse(d.pop("createdAt"))




        event_types = cast(list[str], d.pop("eventTypes"))


        id = d.pop("id")

        object_ = cast(Literal['webhook_endpoint'] , d.pop("object"))
        if object_ != 'webhook_endpoint':
            raise ValueError(f"object must match const 'webhook_endpoint', got '{object_}'")

        status = WebhookEndpointStatus(d.pop("status"))




        url = d.pop("url")

        def _parse_disabled_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                disabled_at_type_0 = isoparse(data)



                return disabled_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        disabled_at = _parse_disabled_at(d.pop("disabledAt", UNSET))


        def _parse_disabled_reason(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        disabled_reason = _parse_disabled_reason(d.pop("disabledReason", UNSET))


        secret = d.pop("secret", UNSET)

        webhook_endpoint = cls(
            created_at=created_at,
            event_types=event_types,
            id=id,
            object_=object_,
            status=status,
            url=url,
            disabled_at=disabled_at,
            disabled_reason=disabled_reason,
            secret=secret,
        )


        webhook_endpoint.additional_properties = d
        return webhook_endpoint

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
