from enum import Enum

class GetUpcomingInvoiceResponse200LinesItemKind(str, Enum):
    PLAN = "PLAN"
    USAGE = "USAGE"

    def __str__(self) -> str:
        return str(self.value)
