from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from typing import cast, Union
from typing import Union

if TYPE_CHECKING:
  from ..models.read_audit_response_200_entries_item import ReadAuditResponse200EntriesItem





T = TypeVar("T", bound="ReadAuditResponse200")



@_attrs_define
class ReadAuditResponse200:
    """ 
        Attributes:
            entries (list['ReadAuditResponse200EntriesItem']):
            next_before_id (Union[None, Unset, int]):
     """

    entries: list['ReadAuditResponse200EntriesItem']
    next_before_id: Union[None, Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.read_audit_response_200_entries_item import ReadAuditResponse200EntriesItem
        entries = []
        for entries_item_data in self.entries:
            entries_item = entries_item_data.to_dict()
            entries.append(entries_item)



        next_before_id: Union[None, Unset, int]
        if isinstance(self.next_before_id, Unset):
            next_before_id = UNSET
        else:
            next_before_id = self.next_before_id


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "entries": entries,
        })
        if next_before_id is not UNSET:
            field_dict["nextBeforeId"] = next_before_id

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.read_audit_response_200_entries_item import ReadAuditResponse200EntriesItem
        d = dict(src_dict)
        entries = []
        _entries = d.pop("entries")
        for entries_item_data in (_entries):
            entries_item = ReadAuditResponse200EntriesItem.from_dict(entries_item_data)



            entries.append(entries_item)


        def _parse_next_before_id(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        next_before_id = _parse_next_before_id(d.pop("nextBeforeId", UNSET))


        read_audit_response_200 = cls(
            entries=entries,
            next_before_id=next_before_id,
        )


        read_audit_response_200.additional_properties = d
        return read_audit_response_200

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
