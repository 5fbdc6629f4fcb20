from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.update_customer_body_tax_status_type_1 import UpdateCustomerBodyTaxStatusType1
from ..models.update_customer_body_tax_status_type_2_type_1 import UpdateCustomerBodyTaxStatusType2Type1
from ..models.update_customer_body_tax_status_type_3_type_1 import UpdateCustomerBodyTaxStatusType3Type1
from ..types import UNSET, Unset
from typing import cast, Union
from typing import Union






T = TypeVar("T", bound="UpdateCustomerBody")



@_attrs_define
class UpdateCustomerBody:
    """ 
        Attributes:
            address (Union[None, Unset, str]):
            city (Union[None, Unset, str]):
            country (Union[None, Unset, str]):
            email (Union[None, Unset, str]):
            name (Union[None, Unset, str]):
            postal_code (Union[None, Unset, str]):
            region (Union[None, Unset, str]):
            tax_id (Union[None, Unset, str]):
            tax_status (Union[None, Unset, UpdateCustomerBodyTaxStatusType1, UpdateCustomerBodyTaxStatusType2Type1,
                UpdateCustomerBodyTaxStatusType3Type1]):
     """

    address: Union[None, Unset, str] = UNSET
    city: Union[None, Unset, str] = UNSET
    country: Union[None, Unset, str] = UNSET
    email: Union[None, Unset, str] = UNSET
    name: Union[None, Unset, str] = UNSET
    postal_code: Union[None, Unset, str] = UNSET
    region: Union[None, Unset, str] = UNSET
    tax_id: Union[None, Unset, str] = UNSET
    tax_status: Union[None, Unset, UpdateCustomerBodyTaxStatusType1, UpdateCustomerBodyTaxStatusType2Type1, UpdateCustomerBodyTaxStatusType3Type1] = UNSET





    def to_dict(self) -> dict[str, Any]:
        address: Union[None, Unset, str]
        if isinstance(self.address, Unset):
            address = UNSET
        else:
            address = self.address

        city: Union[None, Unset, str]
        if isinstance(self.city, Unset):
            city = UNSET
        else:
            city = self.city

        country: Union[None, Unset, str]
        if isinstance(self.country, Unset):
            country = UNSET
        else:
            country = self.country

        email: Union[None, Unset, str]
        if isinstance(self.email, Unset):
            email = UNSET
        else:
            email = self.email

        name: Union[None, Unset, str]
        if isinstance(self.name, Unset):
            name = UNSET
        else:
            name = self.name

        postal_code: Union[None, Unset, str]
        if isinstance(self.postal_code, Unset):
            postal_code = UNSET
        else:
            postal_code = self.postal_code

        region: Union[None, Unset, str]
        if isinstance(self.region, Unset):
            region = UNSET
        else:
            region = self.region

        tax_id: Union[None, Unset, str]
        if isinstance(self.tax_id, Unset):
            tax_id = UNSET
        else:
            tax_id = self.tax_id

        tax_status: Union[None, Unset, str]
        if isinstance(self.tax_status, Unset):
            tax_status = UNSET
        elif isinstance(self.tax_status, UpdateCustomerBodyTaxStatusType1):
            tax_status = self.tax_status.value
        elif isinstance(self.tax_status, UpdateCustomerBodyTaxStatusType2Type1):
            tax_status = self.tax_status.value
        elif isinstance(self.tax_status, UpdateCustomerBodyTaxStatusType3Type1):
            tax_status = self.tax_status.value
        else:
            tax_status = self.tax_status


        field_dict: dict[str, Any] = {}

        field_dict.update({
        })
        if address is not UNSET:
            field_dict["address"] = address
        if city is not UNSET:
            field_dict["city"] = city
        if country is not UNSET:
            field_dict["country"] = country
        if email is not UNSET:
            field_dict["email"] = email
        if name is not UNSET:
            field_dict["name"] = name
        if postal_code is not UNSET:
            field_dict["postalCode"] = postal_code
        if region is not UNSET:
            field_dict["region"] = region
        if tax_id is not UNSET:
            field_dict["taxId"] = tax_id
        if tax_status is not UNSET:
            field_dict["taxStatus"] = tax_status

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        def _parse_address(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        address = _parse_address(d.pop("address", UNSET))


        def _parse_city(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        city = _parse_city(d.pop("city", UNSET))


        def _parse_country(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        country = _parse_country(d.pop("country", UNSET))


        def _parse_email(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        email = _parse_email(d.pop("email", UNSET))


        def _parse_name(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        name = _parse_name(d.pop("name", UNSET))


        def _parse_postal_code(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        postal_code = _parse_postal_code(d.pop("postalCode", UNSET))


        def _parse_region(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        region = _parse_region(d.pop("region", UNSET))


        def _parse_tax_id(data: object) -> Union[None, Unset, str]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(Union[None, Unset, str], data)

        tax_id = _parse_tax_id(d.pop("taxId", UNSET))


        def _parse_tax_status(data: object) -> Union[None, Unset, UpdateCustomerBodyTaxStatusType1, UpdateCustomerBodyTaxStatusType2Type1, UpdateCustomerBodyTaxStatusType3Type1]:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                tax_status_type_1 = UpdateCustomerBodyTaxStatusType1(data)



                return tax_status_type_1
            except: # noqa: E722
                pass
            try:
                if not isinstance(data, str):
                    raise TypeError()
                tax_status_type_2_type_1 = UpdateCustomerBodyTaxStatusType2Type1(data)



                return tax_status_type_2_type_1
            except: # noqa: E722
                pass
            try:
                if not isinstance(data, str):
                    raise TypeError()
                tax_status_type_3_type_1 = UpdateCustomerBodyTaxStatusType3Type1(data)



                return tax_status_type_3_type_1
            except: # noqa: E722
                pass
            return cast(Union[None, Unset, UpdateCustomerBodyTaxStatusType1, UpdateCustomerBodyTaxStatusType2Type1, UpdateCustomerBodyTaxStatusType3Type1], data)

        tax_status = _parse_tax_status(d.pop("taxStatus", UNSET))


        update_customer_body = cls(
            address=address,
            city=city,
            country=country,
            email=email,
            name=name,
            postal_code=postal_code,
            region=region,
            tax_id=tax_id,
            tax_status=tax_status,
        )

        return update_customer_body

