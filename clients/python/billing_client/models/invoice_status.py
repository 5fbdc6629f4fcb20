from enum import Enum

class InvoiceStatus(str, Enum):
    FAILED = "FAILED"
    OPEN = "OPEN"
    PAID = "PAID"
    REVIEW = "REVIEW"
    VOID = "VOID"

    def __str__(self) -> str:
        return str(self.value)
