from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from typing import Union

if TYPE_CHECKING:
  from ..models.ingest_usage_events_response_200_results_item import IngestUsageEventsResponse200ResultsItem





T = TypeVar("T", bound="IngestUsageEventsResponse200")



@_attrs_define
class IngestUsageEventsResponse200:
    """ 
        Attributes:
            accepted (Union[Unset, int]):
            duplicate (Union[Unset, int]):
            rejected (Union[Unset, int]):
            results (Union[Unset, list['IngestUsageEventsResponse200ResultsItem']]):
     """

    accepted: Union[Unset, int] = UNSET
    duplicate: Union[Unset, int] = UNSET
    rejected: Union[Unset, int] = UNSET
    results: Union[Unset, list['IngestUsageEventsResponse200ResultsItem']] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.ingest_usage_events_response_200_results_item import IngestUsageEventsResponse200ResultsItem
        accepted = self.accepted

        duplicate = self.duplicate

        rejected = self.rejected

        results: Union[Unset, list[dict[str, Any]]] = UNSET
        if not isinstance(self.results, Unset):
            results = []
            for results_item_data in self.results:
                results_item = results_item_data.to_dict()
                results.append(results_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if accepted is not UNSET:
            field_dict["accepted"] = accepted
        if duplicate is not UNSET:
            field_dict["duplicate"] = duplicate
        if rejected is not UNSET:
            field_dict["rejected"] = rejected
        if results is not UNSET:
            field_dict["results"] = results

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.ingest_usage_events_response_200_results_item import IngestUsageEventsResponse200ResultsItem
        d = dict(src_dict)
        accepted = d.pop("accepted", UNSET)

        duplicate = d.pop("duplicate", UNSET)

        rejected = d.pop("rejected", UNSET)

        results = []
        _results = d.pop("results", UNSET)
        for results_item_data in (_results or []):
            results_item = IngestUsageEventsResponse200ResultsItem.from_dict(results_item_data)



            results.append(results_item)


        ingest_usage_events_response_200 = cls(
            accepted=accepted,
            duplicate=duplicate,
            rejected=rejected,
            results=results,
        )


        ingest_usage_events_response_200.additional_properties = d
        return ingest_usage_events_response_200

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
