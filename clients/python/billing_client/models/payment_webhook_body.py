from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.payment_webhook_body_status import PaymentWebhookBodyStatus
from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="PaymentWebhookBody")



@_attrs_define
class PaymentWebhookBody:
    """ 
        Attributes:
            event_id (str):
            idempotency_key (str):
            status (PaymentWebhookBodyStatus):
            decline_code (Union[None, Unset, str]):
            id (Union[None, Unset, str]):
     """

    event_id: str
    idempotency_key: str
    status: PaymentWebhookBodyStatus
    decline_code: Union[None, Unset, str] = UNSET
    id: Union[None, Unset, str] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        event_id = self.event_id

        idempotency_key = self.idempotency_key

        status = self.status.value

        decline_code: Union[None, Unset, str]
        if isinstance(self.decline_code, Unset):
            decline_code = UNSET
        else:
            decline_code = self.decline_code

        id: Union[None, Unset, str]
        if isinstance(self.id, Unset):
            id = UNSET
        else:
            id = self.id


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "eventId": event_id,
            "idempotencyKey": idempotency_key,
            "status": status,
        })
        if decline_code is not UNSET:
            field_dict["declineCode"] = decline_code
        if id is not UNSET:
            field_dict["id"] = id

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        event_id = d.pop("eventId")

        idempotency_key = d.pop("idempotencyKey")

        status = PaymentWebhookBodyStatus(d.pop("status"))




        def _parse_decline_code(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        decline_code = _parse_decline_code(d.pop("declineCode", UNSET))


        def _parse_id(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        id = _parse_id(d.pop("id", UNSET))


        payment_webhook_body = cls(
            event_id=event_id,
            idempotency_key=idempotency_key,
            status=status,
            decline_code=decline_code,
            id=id,
        )


        payment_webhook_body.additional_properties = d
        return payment_webhook_body

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
