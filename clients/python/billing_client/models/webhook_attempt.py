from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.webhook_attempt_delivery_status import WebhookAttemptDeliveryStatus
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import cast, Union
from typing import Literal, Union, cast
from typing import Union
import datetime






T = TypeVar("T", bound="WebhookAttempt")



@_attrs_define
class WebhookAttempt:
    """ 
        Attributes:
            attempt (int):
            attempted_at (datetime.datetime):
            delivery_status (WebhookAttemptDeliveryStatus):
            event_id (str):
            event_type (str):
            duration_ms (Union[Unset, int]):
            error (Union[None, Unset, str]):
            object_ (Union[Literal['webhook_attempt'], Unset]):
            outbox_id (Union[Unset, int]):
            status_code (Union[None, Unset, int]):
     """

    attempt: int
    attempted_at: datetime.datetime
    delivery_status: WebhookAttemptDeliveryStatus
    event_id: str
    event_type: str
    duration_ms: Union[Unset, int] = UNSET
    error: Union[None, Unset, str] = UNSET
    object_: Union[Literal['webhook_attempt'], Unset] = UNSET
    outbox_id: Union[Unset, int] = UNSET
    status_code: Union[None, Unset, int] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        attempt = self.attempt

        attempted_at = self.attempted_at.isoformat()

        delivery_status = self.delivery_status.value

        event_id = self.event_id

        event_type = self.event_type

        duration_ms = self.duration_ms

        error: Union[None, Unset, str]
        if isinstance(self.error, Unset):
            error = UNSET
        else:
            error = self.error

        object_ = self.object_

        outbox_id = self.outbox_id

        status_code: Union[None, Unset, int]
        if isinstance(self.status_code, Unset):
            status_code = UNSET
        else:
            status_code = self.status_code


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "attempt": attempt,
            "attemptedAt": attempted_at,
            "deliveryStatus": delivery_status,
            "eventId": event_id,
            "eventType": event_type,
        })
        if duration_ms is not UNSET:
            field_dict["durationMs"] = duration_ms
        if error is not UNSET:
            field_dict["error"] = error
        if object_ is not UNSET:
            field_dict["object"] = object_
        if outbox_id is not UNSET:
            field_dict["outboxId"] = outbox_id
        if status_code is not UNSET:
            field_dict["statusCode"] = status_code

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        attempt = d.pop("attempt")

        attempted_at = isoparse(d.pop("attemptedAt"))




        delivery_status = WebhookAttemptDeliveryStatus(d.pop("deliveryStatus"))




        event_id = d.pop("eventId")

        event_type = d.pop("eventType")

        duration_ms = d.pop("durationMs", UNSET)

        def _parse_error(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        error = _parse_error(d.pop("error", UNSET))


        object_ = cast(Union[Literal['webhook_attempt'], Unset] , d.pop("object", UNSET))
        if object_ != 'webhook_attempt'and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'webhook_attempt', got '{object_}'")

        outbox_id = d.pop("outboxId", UNSET)

        def _parse_status_code(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        status_code = _parse_status_code(d.pop("statusCode", UNSET))


        webhook_attempt = cls(
            attempt=attempt,
            attempted_at=attempted_at,
            delivery_status=delivery_status,
            event_id=event_id,
            event_type=event_type,
            duration_ms=duration_ms,
            error=error,
            object_=object_,
            outbox_id=outbox_id,
            status_code=status_code,
        )


        webhook_attempt.additional_properties = d
        return webhook_attempt

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
