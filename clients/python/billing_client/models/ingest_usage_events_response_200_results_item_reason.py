from enum import Enum

class IngestUsageEventsResponse200ResultsItemReason(str, Enum):
    INVALID_EVENT = "invalid_event"
    INVALID_JSON = "invalid_json"
    INVALID_TIME = "invalid_time"
    IN_FUTURE = "in_future"
    MISSING_PROPERTY = "missing_property"
    NOT_NUMERIC = "not_numeric"
    TOO_OLD = "too_old"
    UNKNOWN_CUSTOMER = "unknown_customer"

    def __str__(self) -> str:
        return str(self.value)
