from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast, Union
from typing import Literal, cast
from typing import Union






T = TypeVar("T", bound="TaxRate")



@_attrs_define
class TaxRate:
    """ 
        Attributes:
            active (bool):
            code (str):
            country (str):
            inclusive (bool):
            name (str):
            object_ (Literal['tax_rate']):
            rate_bp (int):
            region (Union[None, Unset, str]):
     """

    active: bool
    code: str
    country: str
    inclusive: bool
    name: str
    object_: Literal['tax_rate']
    rate_bp: int
    region: Union[None, Unset, str] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        active = self.active

        code = self.code

        country = self.country

        inclusive = self.inclusive

        name = self.name

        object_ = self.object_

        rate_bp = self.rate_bp

        region: Union[None, Unset, str]
        if isinstance(self.region, Unset):
            region = UNSET
        else:
            region = self.region


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "active": active,
            "code": code,
            "country": country,
            "inclusive": inclusive,
            "name": name,
            "object": object_,
            "rateBp": rate_bp,
        })
        if region is not UNSET:
            field_dict["region"] = region

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        active = d.pop("active")

        code = d.pop("code")

        country = d.pop("country")

        inclusive = d.pop("inclusive")

        name = d.pop("name")

        object_ = cast(Literal['tax_rate'] , d.pop("object"))
        if object_ != 'tax_rate':
            raise ValueError(f"object must match const 'tax_rate', got '{object_}'")

        rate_bp = d.pop("rateBp")

        def _parse_region(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        region = _parse_region(d.pop("region", UNSET))


        tax_rate = cls(
            active=active,
            code=code,
            country=country,
            inclusive=inclusive,
            name=name,
            object_=object_,
            rate_bp=rate_bp,
            region=region,
        )


        tax_rate.additional_properties = d
        return tax_rate

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
