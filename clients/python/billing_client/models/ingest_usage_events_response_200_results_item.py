from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.ingest_usage_events_response_200_results_item_reason import IngestUsageEventsResponse200ResultsItemReason
from ..models.ingest_usage_events_response_200_results_item_status import IngestUsageEventsResponse200ResultsItemStatus
from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="IngestUsageEventsResponse200ResultsItem")



@_attrs_define
class IngestUsageEventsResponse200ResultsItem:
    """ 
        Attributes:
            id (Union[None, Unset, str]):
            index (Union[Unset, int]):
            reason (Union[Unset, IngestUsageEventsResponse200ResultsItemReason]):
            status (Union[Unset, IngestUsageEventsResponse200ResultsItemStatus]):
     """

    id: Union[None, Unset, str] = UNSET
    index: Union[Unset, int] = UNSET
    reason: Union[Unset, IngestUsageEventsResponse200ResultsItemReason] = UNSET
    status: Union[Unset, IngestUsageEventsResponse200ResultsItemStatus] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        id: Union[None, Unset, str]
        if isinstance(self.id, Unset):
            id = UNSET
        else:
            id = self.id

        index = self.index

        reason: Union[Unset, str] = UNSET
        if not isinstance(self.reason, Unset):
            reason = self.reason.value


        status: Union[Unset, str] = UNSET
        if not isinstance(self.status, Unset):
            status = self.status.value



        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if id is not UNSET:
            field_dict["id"] = id
        if index is not UNSET:
            field_dict["index"] = index
        if reason is not UNSET:
            field_dict["reason"] = reason
        if status is not UNSET:
            field_dict["status"] = status

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_id(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        id = _parse_id(d.pop("id", UNSET))


        index = d.pop("index", UNSET)

        _reason = d.pop("reason", UNSET)
        reason: Union[Unset, IngestUsageEventsResponse200ResultsItemReason]
        if isinstance(_reason,  Unset):
            reason = UNSET
        else:
            reason = IngestUsageEventsResponse200ResultsItemReason(_reason)




        _status = d.pop("status", UNSET)
        status: Union[Unset, IngestUsageEventsResponse200ResultsItemStatus]
        if isinstance(_status,  Unset):
            status = UNSET
        else:
            status = IngestUsageEventsResponse200ResultsItemStatus(_status)




        ingest_usage_events_response_200_results_item = cls(
            id=id,
            index=index,
            reason=reason,
            status=status,
        )


        ingest_usage_events_response_200_results_item.additional_properties = d
        return ingest_usage_events_response_200_results_item

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
