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






T = TypeVar("T", bound="Plan")



@_attrs_define
class Plan:
    """ 
        Attributes:
            billing_interval (str):
            code (str):
            currency (str):
            id (int):
            interval_count (int):
            object_ (Literal['plan']):
            price_amount (int):
            archived_at (Union[None, Unset, datetime.datetime]): When it was archived: no new subscription or plan change to
                it; its subscriptions renew (null: offered)
            billing_day (Union[None, Unset, int]):
            created_at (Union[Unset, datetime.datetime]):
            external_id (Union[None, Unset, str]):
            price_effective_from (Union[None, Unset, datetime.datetime]):
            self_serve (Union[Unset, bool]): Customers may sign up to it themselves (a customer session's signup; false: 403
                for one)
     """

    billing_interval: str
    code: str
    currency: str
    id: int
    interval_count: int
    object_: Literal['plan']
    price_amount: int
    archived_at: Union[None, Unset, datetime.datetime] = UNSET
    billing_day: Union[None, Unset, int] = UNSET
    created_at: Union[Unset, datetime.datetime] = UNSET
    external_id: Union[None, Unset, str] = UNSET
    price_effective_from: Union[None, Unset, datetime.datetime] = UNSET
    self_serve: Union[Unset, bool] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        billing_interval = self.billing_interval

        code = self.code

        currency = self.currency

        id = self.id

        interval_count = self.interval_count

        object_ = self.object_

        price_amount = self.price_amount

        archived_at: Union[None, Unset, str]
        if isinstance(self.archived_at, Unset):
            archived_at = UNSET
        elif isinstance(self.archived_at, datetime.datetime):
            archived_at = self.archived_at.isoformat()
        else:
            archived_at = self.archived_at

        billing_day: Union[None, Unset, int]
        if isinstance(self.billing_day, Unset):
            billing_day = UNSET
        else:
            billing_day = self.billing_day

        created_at: Union[Unset, str] = UNSET
        if not isinstance(self.created_at, Unset):
            created_at = self.created_at.isoformat()

        external_id: Union[None, Unset, str]
        if isinstance(self.external_id, Unset):
            external_id = UNSET
        else:
            external_id = self.external_id

        price_effective_from: Union[None, Unset, str]
        if isinstance(self.price_effective_from, Unset):
            price_effective_from = UNSET
        elif isinstance(self.price_effective_from, datetime.datetime):
            price_effective_from = self.price_effective_from.isoformat()
        else:
            price_effective_from = self.price_effective_from

        self_serve = self.self_serve


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "billingInterval": billing_interval,
            "code": code,
            "currency": currency,
            "id": id,
            "intervalCount": interval_count,
            "object": object_,
            "priceAmount": price_amount,
        })
        if archived_at is not UNSET:
            field_dict["archivedAt"] = archived_at
        if billing_day is not UNSET:
            field_dict["billingDay"] = billing_day
        if created_at is not UNSET:
            field_dict["createdAt"] = created_at
        if external_id is not UNSET:
            field_dict["externalId"] = external_id
        if price_effective_from is not UNSET:
            field_dict["priceEffectiveFrom"] = price_effective_from
        if self_serve is not UNSET:
            field_dict["selfServe"] = self_serve

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        billing_interval = d.pop("billingInterval")

        code = d.pop("code")

        currency = d.pop("currency")

        id = d.pop("id")

        interval_count = d.pop("intervalCount")

        object_ = cast(Literal['plan'] , d.pop("object"))
        if object_ != 'plan':
            raise ValueError(f"object must match const 'plan', got '{object_}'")

        price_amount = d.pop("priceAmount")

        def _parse_archived_at(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                archived_at_type_0 = isoparse(data)



                return archived_at_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        archived_at = _parse_archived_at(d.pop("archivedAt", UNSET))


        def _parse_billing_day(data: object) -> Union[None, Unset, int]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, int], data)

        billing_day = _parse_billing_day(d.pop("billingDay", UNSET))


        _created_at = d.pop("createdAt", UNSET)
        created_at: Union[Unset, datetime.datetime]
        if isinstance(_created_at,  Unset):
            created_at = UNSET
        else:
            created_at = isoparse(_created_at)




        def _parse_external_id(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        external_id = _parse_external_id(d.pop("externalId", UNSET))


        def _parse_price_effective_from(data: object) -> Union[None, Unset, datetime.datetime]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                price_effective_from_type_0 = isoparse(data)



                return price_effective_from_type_0
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, datetime.datetime], data)

        price_effective_from = _parse_price_effective_from(d.pop("priceEffectiveFrom", UNSET))


        self_serve = d.pop("selfServe", UNSET)

        plan = cls(
            billing_interval=billing_interval,
            code=code,
            currency=currency,
            id=id,
            interval_count=interval_count,
            object_=object_,
            price_amount=price_amount,
            archived_at=archived_at,
            billing_day=billing_day,
            created_at=created_at,
            external_id=external_id,
            price_effective_from=price_effective_from,
            self_serve=self_serve,
        )


        plan.additional_properties = d
        return plan

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
