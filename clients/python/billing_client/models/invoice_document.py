from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union

if TYPE_CHECKING:
  from ..models.invoice_document_taxes_item import InvoiceDocumentTaxesItem
  from ..models.invoice_document_bill_to import InvoiceDocumentBillTo
  from ..models.invoice_document_credit_notes_item import InvoiceDocumentCreditNotesItem
  from ..models.invoice_document_lines_item import InvoiceDocumentLinesItem





T = TypeVar("T", bound="InvoiceDocument")



@_attrs_define
class InvoiceDocument:
    """ 
        Attributes:
            amount_due (int):
            credit_applied (int):
            credit_notes (list['InvoiceDocumentCreditNotesItem']):
            currency (str):
            customer_id (int):
            id (int):
            lines (list['InvoiceDocumentLinesItem']):
            number (Union[None, str]):
            object_ (Literal['invoice']):
            status (str):
            subtotal (int):
            tax_amount (int):
            total (int):
            amount_refunded (Union[Unset, int]):
            bill_to (Union[Unset, InvoiceDocumentBillTo]): The customer's billing details (name, e-mail, address, tax id,
                tax status); for a key without customers:read or admin only customerId and taxStatus
            kind (Union[Unset, str]):
            subscription_id (Union[Unset, int]):
            tax_included (Union[Unset, int]):
            taxes (Union[Unset, list['InvoiceDocumentTaxesItem']]):
     """

    amount_due: int
    credit_applied: int
    credit_notes: list['InvoiceDocumentCreditNotesItem']
    currency: str
    customer_id: int
    id: int
    lines: list['InvoiceDocumentLinesItem']
    number: Union[None, str]
    object_: Literal['invoice']
    status: str
    subtotal: int
    tax_amount: int
    total: int
    amount_refunded: Union[Unset, int] = UNSET
    bill_to: Union[Unset, 'InvoiceDocumentBillTo'] = UNSET
    kind: Union[Unset, str] = UNSET
    subscription_id: Union[Unset, int] = UNSET
    tax_included: Union[Unset, int] = UNSET
    taxes: Union[Unset, list['InvoiceDocumentTaxesItem']] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.invoice_document_taxes_item import InvoiceDocumentTaxesItem
        from ..models.invoice_document_bill_to import InvoiceDocumentBillTo
        from ..models.invoice_document_credit_notes_item import InvoiceDocumentCreditNotesItem
        from ..models.invoice_document_lines_item import InvoiceDocumentLinesItem
        amount_due = self.amount_due

        credit_applied = self.credit_applied

        credit_notes = []
        for credit_notes_item_data in self.credit_notes:
            credit_notes_item = credit_notes_item_data.to_dict()
            credit_notes.append(credit_notes_item)



        currency = self.currency

        customer_id = self.customer_id

        id = self.id

        lines = []
        for lines_item_data in self.lines:
            lines_item = lines_item_data.to_dict()
            lines.append(lines_item)



        number: Union[None, str]
        number = self.number

        object_ = self.object_

        status = self.status

        subtotal = self.subtotal

        tax_amount = self.tax_amount

        total = self.total

        amount_refunded = self.amount_refunded

        bill_to: Union[Unset, dict[str, Any]] = UNSET
        if not isinstance(self.bill_to, Unset):
            bill_to = self.bill_to.to_dict()

        kind = self.kind

        subscription_id = self.subscription_id

        tax_included = self.tax_included

        taxes: Union[Unset, list[dict[str, Any]]] = UNSET
        if not isinstance(self.taxes, Unset):
            taxes = []
            for taxes_item_data in self.taxes:
                taxes_item = taxes_item_data.to_dict()
                taxes.append(taxes_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "amountDue": amount_due,
            "creditApplied": credit_applied,
            "creditNotes": credit_notes,
            "currency": currency,
            "customerId": customer_id,
            "id": id,
            "lines": lines,
            "number": number,
            "object": object_,
            "status": status,
            "subtotal": subtotal,
            "taxAmount": tax_amount,
            "total": total,
        })
        if amount_refunded is not UNSET:
            field_dict["amountRefunded"] = amount_refunded
        if bill_to is not UNSET:
            field_dict["billTo"] = bill_to
        if kind is not UNSET:
            field_dict["kind"] = kind
        if subscription_id is not UNSET:
            field_dict["subscriptionId"] = subscription_id
        if tax_included is not UNSET:
            field_dict["taxIncluded"] = tax_included
        if taxes is not UNSET:
            field_dict["taxes"] = taxes

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.invoice_document_taxes_item import InvoiceDocumentTaxesItem
        from ..models.invoice_document_bill_to import InvoiceDocumentBillTo
        from ..models.invoice_document_credit_notes_item import InvoiceDocumentCreditNotesItem
        from ..models.invoice_document_lines_item import InvoiceDocumentLinesItem
        d = dict(src_dict)
        amount_due = d.pop("amountDue")

        credit_applied = d.pop("creditApplied")

        credit_notes = []
        _credit_notes = d.pop("creditNotes")
        for credit_notes_item_data in (_credit_notes):
            credit_notes_item = InvoiceDocumentCreditNotesItem.from_dict(credit_notes_item_data)



            credit_notes.append(credit_notes_item)


        currency = d.pop("currency")

        customer_id = d.pop("customerId")

        id = d.pop("id")

        lines = []
        _lines = d.pop("lines")
        for lines_item_data in (_lines):
            lines_item = InvoiceDocumentLinesItem.from_dict(lines_item_data)



            lines.append(lines_item)


        def _parse_number(data: object) -> Union[None, str]:
            if data is None:
                return data
            return cast(Union[None, str], data)

        number = _parse_number(d.pop("number"))


        object_ = cast(Literal['invoice'] , d.pop("object"))
        if object_ != 'invoice':
            raise ValueError(f"object must match const 'invoice', got '{object_}'")

        status = d.pop("status")

        subtotal = d.pop("subtotal")

        tax_amount = d.pop("taxAmount")

        total = d.pop("total")

        amount_refunded = d.pop("amountRefunded", UNSET)

        _bill_to = d.pop("billTo", UNSET)
        bill_to: Union[Unset, InvoiceDocumentBillTo]
        if isinstance(_bill_to,  Unset):
            bill_to = UNSET
        else:
            bill_to = InvoiceDocumentBillTo.from_dict(_bill_to)




        kind = d.pop("kind", UNSET)

        subscription_id = d.pop("subscriptionId", UNSET)

        tax_included = d.pop("taxIncluded", UNSET)

        taxes = []
        _taxes = d.pop("taxes", UNSET)
        for taxes_item_data in (_taxes or []):
            taxes_item = InvoiceDocumentTaxesItem.from_dict(taxes_item_data)



            taxes.append(taxes_item)


        invoice_document = cls(
            amount_due=amount_due,
            credit_applied=credit_applied,
            credit_notes=credit_notes,
            currency=currency,
            customer_id=customer_id,
            id=id,
            lines=lines,
            number=number,
            object_=object_,
            status=status,
            subtotal=subtotal,
            tax_amount=tax_amount,
            total=total,
            amount_refunded=amount_refunded,
            bill_to=bill_to,
            kind=kind,
            subscription_id=subscription_id,
            tax_included=tax_included,
            taxes=taxes,
        )


        invoice_document.additional_properties = d
        return invoice_document

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
