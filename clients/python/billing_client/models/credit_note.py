from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="CreditNote")



@_attrs_define
class CreditNote:
    """ 
        Attributes:
            currency (str):
            customer_id (int):
            id (int):
            invoice_id (int):
            number (str):
            object_ (Literal['credit_note']):
            reason (str):
            total (int):
            issued_at (Union[Unset, datetime.datetime]):
            refund_id (Union[None, Unset, int]):
            subtotal (Union[Unset, int]):
            tax_amount (Union[Unset, int]):
     """

    currency: str
    customer_id: int
    id: int
    invoice_id: int
    number: str
    object_: Literal['credit_note']
    reason: str
    total: int
    issued_at: Union[Unset, datetime.datetime] = UNSET
    refund_id: Union[None, Unset, int] = UNSET
    subtotal: Union[Unset, int] = UNSET
    tax_amount: Union[Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        currency = self.currency

        customer_id = self.customer_id

        id = self.id

        invoice_id = self.invoice_id

        number = self.number

        object_ = self.object_

        reason = self.reason

        total = self.total

        issued_at: Union[Unset, str] = UNSET
        if not isinstance(self.issued_at, Unset):
            issued_at = self.issued_at.isoformat()

        refund_id: Union[None, Unset, int]
        if isinstance(self.refund_id, Unset):
            refund_id = UNSET
        else:
            refund_id = self.refund_id

        subtotal = self.subtotal

        tax_amount = self.tax_amount


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "currency": currency,
            "customerId": customer_id,
            "id": id,
            "invoiceId": invoice_id,
            "number": number,
            "object": object_,
            "reason": reason,
            "total": total,
        })
        if issued_at is not UNSET:
            field_dict["issuedAt"] = issued_at
        if refund_id is not UNSET:
            field_dict["refundId"] = refund_id
        if subtotal is not UNSET:
            field_dict["subtotal"] = subtotal
        if tax_amount is not UNSET:
            field_dict["taxAmount"] = tax_amount

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        currency = d.pop("currency")

        customer_id = d.pop("customerId")

        id = d.pop("id")

        invoice_id = d.pop("invoiceId")

        number = d.pop("number")

        object_ = cast(Literal['credit_note'] , d.pop("object"))
        if object_ != 'credit_note':
            raise ValueError(f"object must match const 'credit_note', got '{object_}'")

        reason = d.pop("reason")

        total = d.pop("total")

        _issued_at = d.pop("issuedAt", UNSET)
        issued_at: Union[Unset, datetime.datetime]
        if isinstance(_issued_at,  Unset):
            issued_at = UNSET
        else:
            issued_at = isoparse(_issued_at)




        def _parse_refund_id(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        refund_id = _parse_refund_id(d.pop("refundId", UNSET))


        subtotal = d.pop("subtotal", UNSET)

        tax_amount = d.pop("taxAmount", UNSET)

        credit_note = cls(
            currency=currency,
            customer_id=customer_id,
            id=id,
            invoice_id=invoice_id,
            number=number,
            object_=object_,
            reason=reason,
            total=total,
            issued_at=issued_at,
            refund_id=refund_id,
            subtotal=subtotal,
            tax_amount=tax_amount,
        )


        credit_note.additional_properties = d
        return credit_note

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
