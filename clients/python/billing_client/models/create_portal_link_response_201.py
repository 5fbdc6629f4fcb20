from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import Literal, cast






T = TypeVar("T", bound="CreatePortalLinkResponse201")



@_attrs_define
class CreatePortalLinkResponse201:
    """ 
        Attributes:
            customer_id (int):
            expires_at (str):
            object_ (Literal['portal_link']):
            url (str):
     """

    customer_id: int
    expires_at: str
    object_: Literal['portal_link']
    url: str





    def to_dict(self) -> dict[str, Any]:
        customer_id = self.customer_id

        expires_at = self.expires_at

        object_ = self.object_

        url = self.url


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "customerId": customer_id,
            "expiresAt": expires_at,
            "object": object_,
            "url": url,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        customer_id = d.pop("customerId")

        expires_at = d.pop("expiresAt")

        object_ = cast(Literal['portal_link'] , d.pop("object"))
        if object_ != 'portal_link':
            raise ValueError(f"object must match const 'portal_link', got '{object_}'")

        url = d.pop("url")

        create_portal_link_response_201 = cls(
            customer_id=customer_id,
            expires_at=expires_at,
            object_=object_,
            url=url,
        )

        return create_portal_link_response_201

