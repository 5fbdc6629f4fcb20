from enum import Enum

class ReportReport(str, Enum):
    CHURN = "churn"
    MRR = "mrr"
    REVENUE = "revenue"

    def __str__(self) -> str:
        return str(self.value)
