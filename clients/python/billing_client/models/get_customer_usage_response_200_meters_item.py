from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="GetCustomerUsageResponse200MetersItem")



@_attrs_define
class GetCustomerUsageResponse200MetersItem:
    """ 
        Attributes:
            aggregation (Union[Unset, str]):
            code (Union[Unset, str]):
            events (Union[Unset, int]):
            value (Union[None, Unset, float]):
     """

    aggregation: Union[Unset, str] = UNSET
    code: Union[Unset, str] = UNSET
    events: Union[Unset, int] = UNSET
    value: Union[None, Unset, float] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        aggregation = self.aggregation

        code = self.code

        events = self.events

        value: Union[None, Unset, float]
        if isinstance(self.value, Unset):
            value = UNSET
        else:
            value = self.value


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if aggregation is not UNSET:
            field_dict["aggregation"] = aggregation
        if code is not UNSET:
            field_dict["code"] = code
        if events is not UNSET:
            field_dict["events"] = events
        if value is not UNSET:
            field_dict["value"] = value

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        aggregation = d.pop("aggregation", UNSET)

        code = d.pop("code", UNSET)

        events = d.pop("events", UNSET)

        def _parse_value(data: object) -> Union[None, Unset, float]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, float], data)

        value = _parse_value(d.pop("value", UNSET))


        get_customer_usage_response_200_meters_item = cls(
            aggregation=aggregation,
            code=code,
            events=events,
            value=value,
        )


        get_customer_usage_response_200_meters_item.additional_properties = d
        return get_customer_usage_response_200_meters_item

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
