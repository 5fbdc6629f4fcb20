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
  from ..models.get_customer_usage_response_200_meters_item import GetCustomerUsageResponse200MetersItem





T = TypeVar("T", bound="GetCustomerUsageResponse200")



@_attrs_define
class GetCustomerUsageResponse200:
    """ 
        Attributes:
            customer_id (Union[Unset, int]):
            meters (Union[Unset, list['GetCustomerUsageResponse200MetersItem']]):
            period_end (Union[None, Unset, str]):
            period_start (Union[None, Unset, str]):
     """

    customer_id: Union[Unset, int] = UNSET
    meters: Union[Unset, list['GetCustomerUsageResponse200MetersItem']] = UNSET
    period_end: Union[None, Unset, str] = UNSET
    period_start: Union[None, Unset, str] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.get_customer_usage_response_200_meters_item import GetCustomerUsageResponse200MetersItem
        customer_id = self.customer_id

        meters: Union[Unset, list[dict[str, Any]]] = UNSET
        if not isinstance(self.meters, Unset):
            meters = []
            for meters_item_data in self.meters:
                meters_item = meters_item_data.to_dict()
                meters.append(meters_item)



        period_end: Union[None, Unset, str]
        if isinstance(self.period_end, Unset):
            period_end = UNSET
        else:
            period_end = self.period_end

        period_start: Union[None, Unset, str]
        if isinstance(self.period_start, Unset):
            period_start = UNSET
        else:
            period_start = self.period_start


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if customer_id is not UNSET:
            field_dict["customerId"] = customer_id
        if meters is not UNSET:
            field_dict["meters"] = meters
        if period_end is not UNSET:
            field_dict["periodEnd"] = period_end
        if period_start is not UNSET:
            field_dict["periodStart"] = period_start

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.get_customer_usage_response_200_meters_item import GetCustomerUsageResponse200MetersItem
        d = dict(src_dict)
        customer_id = d.pop("customerId", UNSET)

        meters = []
        _meters = d.pop("meters", UNSET)
        for meters_item_data in (_meters or []):
            meters_item = GetCustomerUsageResponse200MetersItem.from_dict(meters_item_data)



            meters.append(meters_item)


        def _parse_period_end(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        period_end = _parse_period_end(d.pop("periodEnd", UNSET))


        def _parse_period_start(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        period_start = _parse_period_start(d.pop("periodStart", UNSET))


        get_customer_usage_response_200 = cls(
            customer_id=customer_id,
            meters=meters,
            period_end=period_end,
            period_start=period_start,
        )


        get_customer_usage_response_200.additional_properties = d
        return get_customer_usage_response_200

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
