from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.refund_status import RefundStatus
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, cast
from typing import Union
import datetime






T = TypeVar("T", bound="Refund")



@_attrs_define
class Refund:
    """ 
        Attributes:
            amount (int):
            currency (str):
            id (int):
            invoice_id (int):
            object_ (Literal['refund']):
            reason (str):
            status (RefundStatus):
            customer_id (Union[Unset, int]):
            failure_reason (Union[None, Unset, str]):
            provider_reference (Union[None, Unset, str]):
            requested_at (Union[Unset, datetime.datetime]):
            settled_at (Union[None, Unset, datetime.datetime]):
     """

    amount: int
    currency: str
    id: int
    invoice_id: int
    object_: Literal['refund']
    reason: str
    status: RefundStatus
    customer_id: Union[Unset, int] = UNSET
    failure_reason: Union[None, Unset, str] = UNSET
    provider_reference: Union[None, Unset, str] = UNSET
    requested_at: Union[Unset, datetime.datetime] = UNSET
    settled_at: Union[None, Unset, datetime.datetime] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        amount = self.amount

        currency = self.currency

        id = self.id

        invoice_id = self.invoice_id

        object_ = self.object_

        reason = self.reason

        status = self.status.value

        customer_id = self.customer_id

        failure_reason: Union[None, Unset, str]
        if isinstance(self.failure_reason, Unset):
            failure_reason = UNSET
        else:
            failure_reason = self.failure_reason

        provider_reference: Union[None, Unset, str]
        if isinstance(self.provider_reference, Unset):
            provider_reference = UNSET
        else:
            provider_reference = self.provider_reference

        requested_at: Union[Unset, str] = UNSET
        if not isinstance(self.requested_at, Unset):
            requested_at = self.requested_at.isoformat()

        settled_at: Union[None, Unset, str]
        if isinstance(self.settled_at, Unset):
            settled_at = UNSET
        elif isinstance(self.settled_at, datetime.datetime):
            settled_at = self.settled_at.isoformat()
        else:
            settled_at = self.settled_at


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "amount": amount,
            "currency": currency,
            "id": id,
            "invoiceId": invoice_id,
            "object": object_,
            "reason": reason,
            "status": status,
        })
        if customer_id is not UNSET:
            field_dict["customerId"] = customer_id
        if failure_reason is not UNSET:
            field_dict["failureReason"] = failure_reason
        if provider_reference is not UNSET:
            field_dict["providerReference"] = provider_reference
        if requested_at is not UNSET:
            field_dict["requestedAt"] = requested_at
        if settled_at is not UNSET:
            field_dict["settledAt"] = settled_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        amount = d.pop("amount")

        currency = d.pop("currency")

        id = d.pop("id")

        invoice_id = d.pop("invoiceId")

        object_ = cast(Literal['refund'] , d.pop("object"))
        if object_ != 'refund':
            raise ValueError(f"object must match const 'refund', got '{object_}'")

        reason = d.pop("reason")

        status = RefundStatus(d.pop("status"))




        customer_id = d.pop("customerId", UNSET)

        def _parse_failure_reason(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        failure_reason = _parse_failure_reason(d.pop("failureReason", UNSET))


        def _parse_provider_reference(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        provider_reference = _parse_provider_reference(d.pop("providerReference", UNSET))


        _requested_at = d.pop("requestedAt", UNSET)
        requested_at: Union[Unset, datetime.datetime]
        if isinstance(_requested_at,  Unset):
            requested_at = UNSET
        else:
            requested_at = isoparse(_requested_at)




        def _parse_settled_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                settled_at_type_0 = isoparse(data)



                return settled_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        settled_at = _parse_settled_at(d.pop("settledAt", UNSET))


        refund = cls(
            amount=amount,
            currency=currency,
            id=id,
            invoice_id=invoice_id,
            object_=object_,
            reason=reason,
            status=status,
            customer_id=customer_id,
            failure_reason=failure_reason,
            provider_reference=provider_reference,
            requested_at=requested_at,
            settled_at=settled_at,
        )


        refund.additional_properties = d
        return refund

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
