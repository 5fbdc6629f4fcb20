from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.invoice_kind import InvoiceKind
from ..models.invoice_status import InvoiceStatus
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="Invoice")



@_attrs_define
class Invoice:
    """ 
        Attributes:
            amount (int):
            currency (str):
            customer_id (int):
            id (int):
            kind (InvoiceKind):
            object_ (Literal['invoice']):
            status (InvoiceStatus):
            subscription_id (int):
            amount_refunded (Union[Unset, int]):
            attempt_count (Union[Unset, int]):
            closed_at (Union[None, Unset, datetime.datetime]):
            credit_applied (Union[Unset, int]):
            next_attempt_at (Union[None, Unset, datetime.datetime]):
            paid_at (Union[None, Unset, datetime.datetime]):
            period_end (Union[Unset, datetime.datetime]):
            period_start (Union[Unset, datetime.datetime]):
            subtotal (Union[Unset, int]):
     """

    amount: int
    currency: str
    customer_id: int
    id: int
    kind: InvoiceKind
    object_: Literal['invoice']
    status: InvoiceStatus
    subscription_id: int
    amount_refunded: Union[Unset, int] = UNSET
    attempt_count: Union[Unset, int] = UNSET
    closed_at: Union[None, Unset, datetime.datetime] = UNSET
    credit_applied: Union[Unset, int] = UNSET
    next_attempt_at: Union[None, Unset, datetime.datetime] = UNSET
    paid_at: Union[None, Unset, datetime.datetime] = UNSET
    period_end: Union[Unset, datetime.datetime] = UNSET
    period_start: Union[Unset, datetime.datetime] = UNSET
    subtotal: Union[Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        amount = self.amount

        currency = self.currency

        customer_id = self.customer_id

        id = self.id

        kind = self.kind.value

        object_ = self.object_

        status = self.status.value

        subscription_id = self.subscription_id

        amount_refunded = self.amount_refunded

        attempt_count = self.attempt_count

        closed_at: Union[None, Unset, str]
        if isinstance(self.closed_at, Unset):
            closed_at = UNSET
        elif isinstance(self.closed_at, datetime.datetime):
            closed_at = self.closed_at.isoformat()
        else:
            closed_at = self.closed_at

        credit_applied = self.credit_applied

        next_attempt_at: Union[None, Unset, str]
        if isinstance(self.next_attempt_at, Unset):
            next_attempt_at = UNSET
        elif isinstance(self.next_attempt_at, datetime.datetime):
            next_attempt_at = self.next_attempt_at.isoformat()
        else:
            next_attempt_at = self.next_attempt_at

        paid_at: Union[None, Unset, str]
        if isinstance(self.paid_at, Unset):
            paid_at = UNSET
        elif isinstance(self.paid_at, datetime.datetime):
            paid_at = self.paid_at.isoformat()
        else:
            paid_at = self.paid_at

        period_end: Union[Unset, str] = UNSET
        if not isinstance(self.period_end, Unset):
            period_end = self.period_end.isoformat()

        period_start: Union[Unset, str] = UNSET
        if not isinstance(self.period_start, Unset):
            period_start = self.period_start.isoformat()

        subtotal = self.subtotal


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "amount": amount,
            "currency": currency,
            "customerId": customer_id,
            "id": id,
            "kind": kind,
            "object": object_,
            "status": status,
            "subscriptionId": subscription_id,
        })
        if amount_refunded is not UNSET:
            field_dict["amountRefunded"] = amount_refunded
        if attempt_count is not UNSET:
            field_dict["attemptCount"] = attempt_count
        if closed_at is not UNSET:
            field_dict["closedAt"] = closed_at
        if credit_applied is not UNSET:
            field_dict["creditApplied"] = credit_applied
        if next_attempt_at is not UNSET:
            field_dict["nextAttemptAt"] = next_attempt_at
        if paid_at is not UNSET:
            field_dict["paidAt"] = paid_at
        if period_end is not UNSET:
            field_dict["periodEnd"] = period_end
        if period_start is not UNSET:
            field_dict["periodStart"] = period_start
        if subtotal is not UNSET:
            field_dict["subtotal"] = subtotal

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        amount = d.pop("amount")

        currency = d.pop("currency")

        customer_id = d.pop("customerId")

        id = d.pop("id")

        kind = InvoiceKind(d.pop("kind"))




        object_ = cast(Literal['invoice'] , d.pop("object"))
        if object_ != 'invoice':
            raise ValueError(f"object must match const 'invoice', got '{object_}'")

        status = InvoiceStatus(d.pop("status"))




        subscription_id = d.pop("subscriptionId")

        amount_refunded = d.pop("amountRefunded", UNSET)

        attempt_count = d.pop("attemptCount", UNSET)

        def _parse_closed_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                closed_at_type_0 = isoparse(data)



                return closed_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        closed_at = _parse_closed_at(d.pop("closedAt", UNSET))


        credit_applied = d.pop("creditApplied", UNSET)

        def _parse_next_attempt_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                next_attempt_at_type_0 = isoparse(data)



                return next_attempt_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        next_attempt_at = _parse_next_attempt_at(d.pop("nextAttemptAt", UNSET))


        def _parse_paid_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                paid_at_type_0 = isoparse(data)



                return paid_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        paid_at = _parse_paid_at(d.pop("paidAt", UNSET))


        _period_end = d.pop("periodEnd", UNSET)
        period_end: Union[Unset, datetime.datetime]
        if isinstance(_period_end,  Unset):
            period_end = UNSET
        else:
            period_end = isoparse(_period_end)




        _period_start = d.pop("periodStart", UNSET)
        period_start: Union[Unset, datetime.datetime]
        if isinstance(_period_start,  Unset):
            period_start = UNSET
        else:
            period_start = isoparse(_period_start)




        subtotal = d.pop("subtotal", UNSET)

        invoice = cls(
            amount=amount,
            currency=currency,
            customer_id=customer_id,
            id=id,
            kind=kind,
            object_=object_,
            status=status,
            subscription_id=subscription_id,
            amount_refunded=amount_refunded,
            attempt_count=attempt_count,
            closed_at=closed_at,
            credit_applied=credit_applied,
            next_attempt_at=next_attempt_at,
            paid_at=paid_at,
            period_end=period_end,
            period_start=period_start,
            subtotal=subtotal,
        )


        invoice.additional_properties = d
        return invoice

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
