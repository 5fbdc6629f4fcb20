from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import Union
import datetime






T = TypeVar("T", bound="PauseSubscriptionBody")



@_attrs_define
class PauseSubscriptionBody:
    """ 
        Attributes:
            resume_at (Union[Unset, datetime.datetime]):
     """

    resume_at: Union[Unset, datetime.datetime] = UNSET





    def to_dict(self) -> dict[str, Any]:
        resume_at: Union[Unset, str] = UNSET
        if not isinstance(self.resume_at, Unset):
            resume_at = self.resume_at.isoformat()


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if resume_at is not UNSET:
            field_dict["resumeAt"] = resume_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        _resume_at = d.pop("resumeAt", UNSET)
        resume_at: Union[Unset, datetime.datetime]
        if isinstance(_resume_at,  Unset):
            resume_at = UNSET
        else:
            resume_at = isoparse(_resume_at)




        pause_subscription_body = cls(
            resume_at=resume_at,
        )

        return pause_subscription_body

