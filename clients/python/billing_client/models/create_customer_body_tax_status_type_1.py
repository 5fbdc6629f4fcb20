from enum import Enum

class CreateCustomerBodyTaxStatusType1(str, Enum):
    EXEMPT = "EXEMPT"
    REVERSE_CHARGE = "REVERSE_CHARGE"
    TAXABLE = "TAXABLE"

    def __str__(self) -> str:
        return str(self.value)
