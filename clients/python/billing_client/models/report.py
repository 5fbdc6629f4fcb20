from collections.abc import Mapping
from typing import Any, TypeVar, Optional, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.report_report import ReportReport
from ..types import UNSET, Unset
from dateutil.parser import isoparse
from typing import cast
from typing import Literal, cast
from typing import Union
import datetime

if TYPE_CHECKING:
  from ..models.report_data_item import ReportDataItem





T = TypeVar("T", bound="Report")



@_attrs_define
class Report:
    """ 
        Attributes:
            data (list['ReportDataItem']):
            object_ (Literal['report']):
            report (ReportReport):
            at (Union[Unset, datetime.datetime]):
            from_ (Union[Unset, datetime.date]):
            to (Union[Unset, datetime.date]):
     """

    data: list['ReportDataItem']
    object_: Literal['report']
    report: ReportReport
    at: Union[Unset, datetime.datetime] = UNSET
    from_: Union[Unset, datetime.date] = UNSET
    to: Union[Unset, datetime.date] = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.report_data_item import ReportDataItem
        data = []
        for data_item_data in self.data:
            data_item = data_item_data.to_dict()
            data.append(data_item)



        object_ = self.object_

        report = self.report.value

        at: Union[Unset, str] = UNSET
        if not isinstance(self.at, Unset):
            at = self.at.isoformat()

        from_: Union[Unset, str] = UNSET
        if not isinstance(self.from_, Unset):
            from_ = self.from_.isoformat()

        to: Union[Unset, str] = UNSET
        if not isinstance(self.to, Unset):
            to = self.to.isoformat()


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "data": data,
            "object": object_,
            "report": report,
        })
        if at is not UNSET:
            field_dict["at"] = at
        if from_ is not UNSET:
            field_dict["from"] = from_
        if to is not UNSET:
            field_dict["to"] = to

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.report_data_item import ReportDataItem
        d = dict(src_dict)
        data = []
        _data = d.pop("data")
        for data_item_data in (_data):
            data_item = ReportDataItem.from_dict(data_item_data)



            data.append(data_item)


        object_ = cast(Literal['report'] , d.pop("object"))
        if object_ != 'report':
            raise ValueError(f"object must match const 'report', got '{object_}'")

        report = ReportReport(d.pop("report"))




        _at = d.pop("at", UNSET)
        at: Union[Unset, datetime.datetime]
        if isinstance(_at,  Unset):
            at = UNSET
        else:
            at = isoparse(_at)




        _from_ = d.pop("from", UNSET)
        from_: Union[Unset, datetime.date]
        if isinstance(_from_,  Unset):
            from_ = UNSET
        else:
            from_ = isoparse(_from_).date()




        _to = d.pop("to", UNSET)
        to: Union[Unset, datetime.date]
        if isinstance(_to,  Unset):
            to = UNSET
        else:
            to = isoparse(_to).date()




        report = cls(
            data=data,
            object_=object_,
            report=report,
            at=at,
            from_=from_,
            to=to,
        )


        report.additional_properties = d
        return report

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
