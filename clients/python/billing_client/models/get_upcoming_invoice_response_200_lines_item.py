from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.get_upcoming_invoice_response_200_lines_item_kind import GetUpcomingInvoiceResponse200LinesItemKind
from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="GetUpcomingInvoiceResponse200LinesItem")



@_attrs_define
class GetUpcomingInvoiceResponse200LinesItem:
    """ 
        Attributes:
            amount (Union[Unset, int]):
            kind (Union[Unset, GetUpcomingInvoiceResponse200LinesItemKind]):
            late (Union[Unset, bool]):
            meter_code (Union[Unset, str]):
            period_end (Union[None, Unset, str]):
            period_start (Union[None, Unset, str]):
            plan_code (Union[Unset, str]):
            quantity (Union[Unset, float]):
            unit_amount (Union[Unset, int]):
     """

    amount: Union[Unset, int] = UNSET
    kind: Union[Unset, GetUpcomingInvoiceResponse200LinesItemKind] = UNSET
    late: Union[Unset, bool] = UNSET
    meter_code: Union[Unset, str] = UNSET
    period_end: Union[None, Unset, str] = UNSET
    period_start: Union[None, Unset, str] = UNSET
    plan_code: Union[Unset, str] = UNSET
    quantity: Union[Unset, float] = UNSET
    unit_amount: Union[Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        amount = self.amount

        kind: Union[Unset, str] = UNSET
        if not isinstance(self.kind, Unset):
            kind = self.kind.value


        late = self.late

        meter_code = self.meter_code

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

        plan_code = self.plan_code

        quantity = self.quantity

        unit_amount = self.unit_amount


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if amount is not UNSET:
            field_dict["amount"] = amount
        if kind is not UNSET:
            field_dict["kind"] = kind
        if late is not UNSET:
            field_dict["late"] = late
        if meter_code is not UNSET:
            field_dict["meterCode"] = meter_code
        if period_end is not UNSET:
            field_dict["periodEnd"] = period_end
        if period_start is not UNSET:
            field_dict["periodStart"] = period_start
        if plan_code is not UNSET:
            field_dict["planCode"] = plan_code
        if quantity is not UNSET:
            field_dict["quantity"] = quantity
        if unit_amount is not UNSET:
            field_dict["unitAmount"] = unit_amount

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        amount = d.pop("amount", UNSET)

        _kind = d.pop("kind", UNSET)
        kind: Union[Unset, GetUpcomingInvoiceResponse200LinesItemKind]
        if isinstance(_kind,  Unset):
            kind = UNSET
        else:
            kind = GetUpcomingInvoiceResponse200LinesItemKind(_kind)




        late = d.pop("late", UNSET)

        meter_code = d.pop("meterCode", UNSET)

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


        plan_code = d.pop("planCode", UNSET)

        quantity = d.pop("quantity", UNSET)

        unit_amount = d.pop("unitAmount", UNSET)

        get_upcoming_invoice_response_200_lines_item = cls(
            amount=amount,
            kind=kind,
            late=late,
            meter_code=meter_code,
            period_end=period_end,
            period_start=period_start,
            plan_code=plan_code,
            quantity=quantity,
            unit_amount=unit_amount,
        )


        get_upcoming_invoice_response_200_lines_item.additional_properties = d
        return get_upcoming_invoice_response_200_lines_item

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
