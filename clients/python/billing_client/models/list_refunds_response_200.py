from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast
from typing import Literal, cast

if TYPE_CHECKING:
  from ..models.refund import Refund





T = TypeVar("T", bound="ListRefundsResponse200")



@_attrs_define
class ListRefundsResponse200:
    """ 
        Attributes:
            data (list['Refund']):
            object_ (Literal['list']):
     """

    data: list['Refund']
    object_: Literal['list']
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.refund import Refund
        data = []
        for data_item_data in self.data:
            data_item = data_item_data.to_dict()
            data.append(data_item)



        object_ = self.object_


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "data": data,
            "object": object_,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.refund import Refund
        d = dict(src_dict)
        data = []
        _data = d.pop("data")
        for data_item_data in (_data):
            data_item = Refund.from_dict(data_item_data)



            data.append(data_item)


        object_ = cast(Literal['list'] , d.pop("object"))
        if object_ != 'list':
            raise ValueError(f"object must match const 'list', got '{object_}'")

        list_refunds_response_200 = cls(
            data=data,
            object_=object_,
        )


        list_refunds_response_200.additional_properties = d
        return list_refunds_response_200

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
