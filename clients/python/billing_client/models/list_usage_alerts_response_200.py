from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast
from typing import cast, Union
from typing import Literal, cast

if TYPE_CHECKING:
  from ..models.usage_alert import UsageAlert





T = TypeVar("T", bound="ListUsageAlertsResponse200")



@_attrs_define
class ListUsageAlertsResponse200:
    """ 
        Attributes:
            data (list['UsageAlert']):
            has_more (bool): More rows past this page in its direction
            next_cursor (Union[None, str]): starting_after for the next page
            object_ (Literal['list']):
            previous_cursor (Union[None, str]): ending_before for the page before
     """

    data: list['UsageAlert']
    has_more: bool
    next_cursor: Union[None, str]
    object_: Literal['list']
    previous_cursor: Union[None, str]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.usage_alert import UsageAlert
        data = []
        for data_item_data in self.data:
            data_item = data_item_data.to_dict()
            data.append(data_item)



        has_more = self.has_more

        next_cursor: Union[None, str]
        next_cursor = self.next_cursor

        object_ = self.object_

        previous_cursor: Union[None, str]
        previous_cursor = self.previous_cursor


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "data": data,
            "hasMore": has_more,
            "nextCursor": next_cursor,
            "object": object_,
            "previousCursor": previous_cursor,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.usage_alert import UsageAlert
        d = dict(src_dict)
        data = []
        _data = d.pop("data")
        for data_item_data in (_data):
            data_item = UsageAlert.from_dict(data_item_data)



            data.append(data_item)


        has_more = d.pop("hasMore")

        def _parse_next_cursor(data: object) -> Union[None, str]:
            if data is None:
                return data
            return cast(Union[None, str], data)

        next_cursor = _parse_next_cursor(d.pop("nextCursor"))


        object_ = cast(Literal['list'] , d.pop("object"))
        if object_ != 'list':
            raise ValueError(f"object must match const 'list', got '{object_}'")

        def _parse_previous_cursor(data: object) -> Union[None, str]:
            if data is None:
                return data
            return cast(Union[None, str], data)

        previous_cursor = _parse_previous_cursor(d.pop("previousCursor"))


        list_usage_alerts_response_200 = cls(
            data=data,
            has_more=has_more,
            next_cursor=next_cursor,
            object_=object_,
            previous_cursor=previous_cursor,
        )


        list_usage_alerts_response_200.additional_properties = d
        return list_usage_alerts_response_200

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
