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

if TYPE_CHECKING:
  from ..models.ingest_usage_events_body_item_data_type_0 import IngestUsageEventsBodyItemDataType0





T = TypeVar("T", bound="IngestUsageEventsBodyItem")



@_attrs_define
class IngestUsageEventsBodyItem:
    """ 
        Attributes:
            id (str):
            source (str):
            specversion (Literal['1.0']):
            subject (str):
            time (datetime.datetime):
            type_ (str):
            data (Union['IngestUsageEventsBodyItemDataType0', None, Unset]):
     """

    id: str
    source: str
    specversion: Literal['1.0']
    subject: str
    time: datetime.datetime
    type_: str
    data: Union['IngestUsageEventsBodyItemDataType0', None, Unset] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.ingest_usage_events_body_item_data_type_0 import IngestUsageEventsBodyItemDataType0
        id = self.id

        source = self.source

        specversion = self.specversion

        subject = self.subject

        time = self.time.isoformat()

        type_ = self.type_

        data: Union[None, Unset, dict[str, Any]]
        if isinstance(self.data, Unset):
            data = UNSET
        elif isinstance(self.data, IngestUsageEventsBodyItemDataType0):
            data = self.data.to_dict()
        else:
            data = self.data


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "id": id,
            "source": source,
            "specversion": specversion,
            "subject": subject,
            "time": time,
            "type": type_,
        })
        if data is not UNSET:
            field_dict["data"] = data

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.ingest_usage_events_body_item_data_type_0 import IngestUsageEventsBodyItemDataType0
        d = dict(src_dict)
        id = d.pop("id")

        source = d.pop("source")

        specversion = cast(Literal['1.0'] , d.pop("specversion"))
        if specversion != '1.0':
            raise ValueError(f"specversion must match const '1.0', got '{specversion}'")

        subject = d.pop("subject")

        time = isoparse(d.pop("time"))




        type_ = d.pop("type")

        def _parse_data(data: object) -> Union['IngestUsageEventsBodyItemDataType0', None, Unset]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                data_type_0 = IngestUsageEventsBodyItemDataType0.from_dict(data)



                return data_type_0
            except: # noqa: E722
                pass
            return cast(Union['IngestUsageEventsBodyItemDataType0', None, Unset], data)

        data = _parse_data(d.pop("data", UNSET))


        ingest_usage_events_body_item = cls(
            id=id,
            source=source,
            specversion=specversion,
            subject=subject,
            time=time,
            type_=type_,
            data=data,
        )


        ingest_usage_events_body_item.additional_properties = d
        return ingest_usage_events_body_item

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
