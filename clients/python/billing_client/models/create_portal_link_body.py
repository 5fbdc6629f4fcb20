from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import Union






T = TypeVar("T", bound="CreatePortalLinkBody")



@_attrs_define
class CreatePortalLinkBody:
    """ 
        Attributes:
            next_ (Union[Unset, str]):
     """

    next_: Union[Unset, str] = UNSET





    def to_dict(self) -> dict[str, Any]:
        next_ = self.next_


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if next_ is not UNSET:
            field_dict["next"] = next_

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        next_ = d.pop("next", UNSET)

        create_portal_link_body = cls(
            next_=next_,
        )

        return create_portal_link_body

