from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="UpsertTaxRateBody")



@_attrs_define
class UpsertTaxRateBody:
    """ 
        Attributes:
            code (str):
            country (str):
            inclusive (bool):
            name (str):
            rate_bp (int):
            active (Union[Unset, bool]):
            region (Union[None, Unset, str]):
     """

    code: str
    country: str
    inclusive: bool
    name: str
    rate_bp: int
    active: Union[Unset, bool] = UNSET
    region: Union[None, Unset, str] = UNSET





    def to_dict(self) -> dict[str, Any]:
        code = self.code

        country = self.country

        inclusive = self.inclusive

        name = self.name

        rate_bp = self.rate_bp

        active = self.active

        region: Union[None, Unset, str]
        if isinstance(self.region, Unset):
            region = UNSET
        else:
            region = self.region


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "code": code,
            "country": country,
            "inclusive": inclusive,
            "name": name,
            "rateBp": rate_bp,
        })
        if active is not UNSET:
            field_dict["active"] = active
        if region is not UNSET:
            field_dict["region"] = region

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        code = d.pop("code")

        country = d.pop("country")

        inclusive = d.pop("inclusive")

        name = d.pop("name")

        rate_bp = d.pop("rateBp")

        active = d.pop("active", UNSET)

        def _parse_region(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        region = _parse_region(d.pop("region", UNSET))


        upsert_tax_rate_body = cls(
            code=code,
            country=country,
            inclusive=inclusive,
            name=name,
            rate_bp=rate_bp,
            active=active,
            region=region,
        )

        return upsert_tax_rate_body

