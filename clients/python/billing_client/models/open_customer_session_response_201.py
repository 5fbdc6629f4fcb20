from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from dateutil.parser import isoparse
from typing import cast
from typing import Literal, cast
import datetime






T = TypeVar("T", bound="OpenCustomerSessionResponse201")



@_attrs_define
class OpenCustomerSessionResponse201:
    """ 
        Attributes:
            customer_id (int):
            expires_at (datetime.datetime):
            object_ (Literal['customer_session']):
            token (str):
     """

    customer_id: int
    expires_at: datetime.datetime
    object_: Literal['customer_session']
    token: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        customer_id = self.customer_id

        expires_at = self.expires_at.isoformat()

        object_ = self.object_

        token = self.token


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "customerId": customer_id,
            "expiresAt": expires_at,
            "object": object_,
            "token": token,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        customer_id = d.pop("customerId")

        expires_at = isoparse(d.pop("expiresAt"))




        object_ = cast(Literal['customer_session'] , d.pop("object"))
        if object_ != 'customer_session':
            raise ValueError(f"object must match const 'customer_session', got '{object_}'")

        token = d.pop("token")

        open_customer_session_response_201 = cls(
            customer_id=customer_id,
            expires_at=expires_at,
            object_=object_,
            token=token,
        )


        open_customer_session_response_201.additional_properties = d
        return open_customer_session_response_201

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
