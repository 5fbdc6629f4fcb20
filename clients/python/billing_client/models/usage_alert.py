from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="UsageAlert")



@_attrs_define
class UsageAlert:
    """ 
        Attributes:
            created_at (datetime.datetime):
            customer_id (int):
            id (int):
            meter_code (str):
            object_ (Literal['usage_alert']):
            threshold (float):
            deleted (Union[Unset, bool]): DELETE's answer: the alert deleted
            fired_for (Union[None, Unset, datetime.datetime]): The start of the open period it last fired in (null: never)
            updated_at (Union[Unset, datetime.datetime]):
     """

    created_at: datetime.datetime
    customer_id: int
    id: int
    meter_code: str
    object_: Literal['usage_alert']
    threshold: float
    deleted: Union[Unset, bool] = UNSET
    fired_for: Union[None, Unset, datetime.datetime] = UNSET
    updated_at: Union[Unset, datetime.datetime] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        created_at = self.created_at.isoformat()

        customer_id = self.customer_id

        id = self.id

        meter_code = self.meter_code

        object_ = self.object_

        threshold = self.threshold

        deleted = self.deleted

        fired_for: Union[None, Unset, str]
        if isinstance(self.fired_for, Unset):
            fired_for = UNSET
        elif isinstance(self.fired_for, datetime.datetime):
            fired_for = self.fired_for.isoformat()
        else:
            fired_for = self.fired_for

        updated_at: Union[Unset, str] = UNSET
        if not isinstance(self.updated_at, Unset):
            updated_at = self.updated_at.isoformat()


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "createdAt": created_at,
            "customerId": customer_id,
            "id": id,
            "meterCode": meter_code,
            "object": object_,
            "threshold": threshold,
        })
        if deleted is not UNSET:
            field_dict["deleted"] = deleted
        if fired_for is not UNSET:
            field_dict["firedFor"] = fired_for
        if updated_at is not UNSET:
            field_dict["updatedAt"] = updated_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        created_at = isoparse(d.pop("createdAt"))




        customer_id = d.pop("customerId")

        id = d.pop("id")

        meter_code = d.pop("meterCode")

        object_ = cast(Literal['usage_alert'] , d.pop("object"))
        if object_ != 'usage_alert':
            raise ValueError(f"object must match const 'usage_alert', got '{object_}'")

        threshold = d.pop("threshold")

        deleted = d.pop("deleted", UNSET)

        def _parse_fired_for(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                fired_for_type_0 = isoparse(data)



                return fired_for_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        fired_for = _parse_fired_for(d.pop("firedFor", UNSET))


        _updated_at = d.pop("updatedAt", UNSET)
        updated_at: Union[Unset, datetime.datetime]
        if isinstance(_updated_at,  Unset):
            updated_at = UNSET
        else:
            updated_at = isoparse(_updated_at)




        usage_alert = cls(
            created_at=created_at,
            customer_id=customer_id,
            id=id,
            meter_code=meter_code,
            object_=object_,
            threshold=threshold,
            deleted=deleted,
            fired_for=fired_for,
            updated_at=updated_at,
        )


        usage_alert.additional_properties = d
        return usage_alert

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
