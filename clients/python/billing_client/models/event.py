from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import Literal, cast
from typing import Union
from uuid import UUID
import datetime

if TYPE_CHECKING:
  from ..models.event_payload import EventPayload





T = TypeVar("T", bound="Event")



@_attrs_define
class Event:
    """ 
        Attributes:
            aggregate_id (int):
            aggregate_type (str):
            created_at (datetime.datetime):
            id (UUID):
            object_ (Literal['event']):
            payload (EventPayload): The CloudEvent as published (docs/events.md)
            seq (int):
            type_ (str):
            customer_id (Union[Unset, int]):
     """

    aggregate_id: int
    aggregate_type: str
    created_at: datetime.datetime
    id: UUID
    object_: Literal['event']
    payload: 'EventPayload'
    seq: int
    type_: str
    customer_id: Union[Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.event_payload import EventPayload
        aggregate_id = self.aggregate_id

        aggregate_type = self.aggregate_type

        created_at = self.created_at.isoformat()

        id = str(self.id)

        object_ = self.object_

        payload = self.payload.to_dict()

        seq = self.seq

        type_ = self.type_

        customer_id = self.customer_id


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "aggregateId": aggregate_id,
            "aggregateType": aggregate_type,
            "createdAt": created_at,
            "id": id,
            "object": object_,
            "payload": payload,
            "seq": seq,
            "type": type_,
        })
        if customer_id is not UNSET:
            field_dict["customerId"] = customer_id

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.event_payload import EventPayload
        d = dict(src_dict)
        aggregate_id = d.pop("aggregateId")

        aggregate_type = d.pop("aggregateType")

        created_at = isoparse(d.pop("createdAt"))




        id = UUID(d.pop("id"))




        object_ = cast(Literal['event'] , d.pop("object"))
        if object_ != 'event':
            raise ValueError(f"object must match const 'event', got '{object_}'")

        payload = EventPayload.from_dict(d.pop("payload"))




        seq = d.pop("seq")

        type_ = d.pop("type")

        customer_id = d.pop("customerId", UNSET)

        event = cls(
            aggregate_id=aggregate_id,
            aggregate_type=aggregate_type,
            created_at=created_at,
            id=id,
            object_=object_,
            payload=payload,
            seq=seq,
            type_=type_,
            customer_id=customer_id,
        )


        event.additional_properties = d
        return event

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
