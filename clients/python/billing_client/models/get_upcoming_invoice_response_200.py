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
  from ..models.get_upcoming_invoice_response_200_lines_item import GetUpcomingInvoiceResponse200LinesItem





T = TypeVar("T", bound="GetUpcomingInvoiceResponse200")



@_attrs_define
class GetUpcomingInvoiceResponse200:
    """ 
        Attributes:
            as_of (Union[None, Unset, str]):
            currency (Union[Unset, str]):
            customer_id (Union[Unset, int]):
            invoiced_at (Union[None, Unset, str]):
            lines (Union[Unset, list['GetUpcomingInvoiceResponse200LinesItem']]):
            subscription_id (Union[Unset, int]):
            subtotal (Union[Unset, int]):
            tax (Union[Unset, int]):
            tax_inclusive (Union[Unset, bool]):
            total (Union[Unset, int]):
     """

    as_of: Union[None, Unset, str] = UNSET
    currency: Union[Unset, str] = UNSET
    customer_id: Union[Unset, int] = UNSET
    invoiced_at: Union[None, Unset, str] = UNSET
    lines: Union[Unset, list['GetUpcomingInvoiceResponse200LinesItem']] = UNSET
    subscription_id: Union[Unset, int] = UNSET
    subtotal: Union[Unset, int] = UNSET
    tax: Union[Unset, int] = UNSET
    tax_inclusive: Union[Unset, bool] = UNSET
    total: Union[Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.get_upcoming_invoice_response_200_lines_item import GetUpcomingInvoiceResponse200LinesItem
        as_of: Union[None, Unset, str]
        if isinstance(self.as_of, Unset):
            as_of = UNSET
        else:
            as_of = self.as_of

        currency = self.currency

        customer_id = self.customer_id

        invoiced_at: Union[None, Unset, str]
        if isinstance(self.invoiced_at, Unset):
            invoiced_at = UNSET
        else:
            invoiced_at = self.invoiced_at

        lines: Union[Unset, list[dict[str, Any]]] = UNSET
        if not isinstance(self.lines, Unset):
            lines = []
            for lines_item_data in self.lines:
                lines_item = lines_item_data.to_dict()
                lines.append(lines_item)



        subscription_id = self.subscription_id

        subtotal = self.subtotal

        tax = self.tax

        tax_inclusive = self.tax_inclusive

        total = self.total


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
        })
        if as_of is not UNSET:
            field_dict["asOf"] = as_of
        if currency is not UNSET:
            field_dict["currency"] = currency
        if customer_id is not UNSET:
            field_dict["customerId"] = customer_id
        if invoiced_at is not UNSET:
            field_dict["invoicedAt"] = invoiced_at
        if lines is not UNSET:
            field_dict["lines"] = lines
        if subscription_id is not UNSET:
            field_dict["subscriptionId"] = subscription_id
        if subtotal is not UNSET:
            field_dict["subtotal"] = subtotal
        if tax is not UNSET:
            field_dict["tax"] = tax
        if tax_inclusive is not UNSET:
            field_dict["taxInclusive"] = tax_inclusive
        if total is not UNSET:
            field_dict["total"] = total

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.get_upcoming_invoice_response_200_lines_item import GetUpcomingInvoiceResponse200LinesItem
        d = dict(src_dict)
        def _parse_as_of(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        as_of = _parse_as_of(d.pop("asOf", UNSET))


        currency = d.pop("currency", UNSET)

        customer_id = d.pop("customerId", UNSET)

        def _parse_invoiced_at(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        invoiced_at = _parse_invoiced_at(d.pop("invoicedAt", UNSET))


        lines = []
        _lines = d.pop("lines", UNSET)
        for lines_item_data in (_lines or []):
            lines_item = GetUpcomingInvoiceResponse200LinesItem.from_dict(lines_item_data)



            lines.append(lines_item)


        subscription_id = d.pop("subscriptionId", UNSET)

        subtotal = d.pop("subtotal", UNSET)

        tax = d.pop("tax", UNSET)

        tax_inclusive = d.pop("taxInclusive", UNSET)

        total = d.pop("total", UNSET)

        get_upcoming_invoice_response_200 = cls(
            as_of=as_of,
            currency=currency,
            customer_id=customer_id,
            invoiced_at=invoiced_at,
            lines=lines,
            subscription_id=subscription_id,
            subtotal=subtotal,
            tax=tax,
            tax_inclusive=tax_inclusive,
            total=total,
        )


        get_upcoming_invoice_response_200.additional_properties = d
        return get_upcoming_invoice_response_200

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
