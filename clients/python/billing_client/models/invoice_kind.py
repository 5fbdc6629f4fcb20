from enum import Enum

class InvoiceKind(str, Enum):
    INITIAL = "INITIAL"
    PLAN_CHANGE = "PLAN_CHANGE"
    PRORATION = "PRORATION"
    RENEWAL = "RENEWAL"

    def __str__(self) -> str:
        return str(self.value)
